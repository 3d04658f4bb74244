"""`python -m operator_wallet serve`: run the reference wallet until interrupted."""

import sys

from operator_wallet.command import main

sys.exit(main())
