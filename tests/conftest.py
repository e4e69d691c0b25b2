import sys
from pathlib import Path

# the tests share a few helpers kept next to them
sys.path.insert(0, str(Path(__file__).parent))
