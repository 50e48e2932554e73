"""``python -m csp_web``: the csp-web command."""

import sys

from .cli import main

sys.exit(main())
