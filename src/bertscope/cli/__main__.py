"""`python -m bertscope.cli`: the `bertscope` command."""

import sys

from bertscope.cli import main

sys.exit(main())
