"""``python -m csp_web``: the csp-web command."""

import sys

from csp_web.cli.main import main

sys.exit(main())
