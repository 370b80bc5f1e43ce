# The package under test: this source tree's (python/attnc), unless
# ATTNC_TEST_INSTALLED is set (then whatever attnc pip installed).
import os
import sys
from pathlib import Path

if not os.environ.get("ATTNC_TEST_INSTALLED"):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
