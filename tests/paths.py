"""Where the data the tests read lives: all of it inside the repository, so a
plain clone is enough (never a sibling folder)."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: Real outputs of Slurm 22.05.8 and 25.11.7 controllers (see its README.md).
FIXTURES = REPO / "tests" / "fixtures" / "slurm"
#: The shipped workload trace (Philly, Sept-Oct 2017; see contrib/traces/README.md).
PHILLY_TRACE = REPO / "contrib" / "traces" / "philly-2017-09-10.csv"
