"""Prints mvs's runtime dependencies, one a line, as pyproject.toml pins them: the one list that
infra/Dockerfile installs and infra/setup_containers.sh turns into a wheelhouse."""

import sys
import tomllib
from pathlib import Path

pyproject = Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml")
print(*tomllib.loads(pyproject.read_text())["project"]["dependencies"], sep="\n")
