"""``python -m csp_web``: the csp-web command."""

import sys

from csp_web.cli import main

sys.exit(main())
