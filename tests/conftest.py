"""Settings shared by every test tier.

Hypothesis: no per-example deadline (the machine is shared and slow; timing is
never what a property test checks). In CI the examples are derandomized so a
run is repeatable; locally they stay random to keep exploring.
"""

import os

from hypothesis import settings

settings.register_profile("slurmpolicy", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "slurmpolicy")
