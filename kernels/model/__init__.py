"""The depthwise kernels' cost model on an H100: predictions from static facts, never measurements.

``static`` (tile plans mirrored from ``depthwise.cu`` and SASS instruction counts), ``plan_v4`` (the
v4 planner's mirror), ``calibration`` (the model fitted on the measured H100 rows, and the sweep's
predictions); ``python -m kernels.model`` prints the tables and runs the CI check
(``docs/depthwise-model.md``). Outside the family: ``kernels/depthwise`` holds only what runs.
"""

from __future__ import annotations
