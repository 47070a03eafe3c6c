"""Suite-wide settings.

Block-size tuning (``blockbuster.tuning``) only models in the test suite: nothing is
measured unless a test asks for it by name (``--tune measure``, ``tune="measure"``),
whatever the developer's own ``$BLOCKBUSTER_TUNE`` says. Subprocesses inherit it.
"""

import os

os.environ["BLOCKBUSTER_TUNE"] = "model"
