"""``python -m csp_web``: the csp-web command."""

import sys

from csp_web.app.start import main

sys.exit(main())
