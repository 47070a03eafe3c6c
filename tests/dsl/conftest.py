import sys
from pathlib import Path

# textfuzz.py (the fuzz case generator) is shared with benchmarks/fuzz_text.py.
sys.path.insert(0, str(Path(__file__).parent))
