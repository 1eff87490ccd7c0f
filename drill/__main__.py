"""``python -m drill [-k NAME]``: run the failure drills against the whole stack."""

from __future__ import annotations

import sys

from drill.runner import main

if __name__ == "__main__":
    sys.exit(main())
