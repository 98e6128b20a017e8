"""Where the tests' fixed files are, wherever a test file stands."""

from pathlib import Path

AVRO_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "avro"
REPO = Path(__file__).resolve().parents[2]
