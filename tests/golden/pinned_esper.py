"""`python pinned_esper.py ARGS...` runs `esper ARGS...` on the float path every x86-64 CPU computes alike.

The golden cases start esper through this file, with the environment from `cases.PINNED_ENV`. Between them they fix
every choice a CPU would otherwise make for itself:
- `ATEN_CPU_CAPABILITY=default`: PyTorch's own kernels (elementwise, reductions, im2col) run their scalar code, not
  the AVX2 or AVX-512 variants picked from the CPU's flags;
- `MKL_CBWR=COMPATIBLE`: MKL's matrix products take the code path it guarantees bitwise across x86-64 CPUs;
- oneDNN and NNPACK off (below): both pick kernels and blocking from the CPU's ISA and cache sizes, so convolutions
  run through PyTorch's im2col + MKL path instead;
- one intra-op thread: reductions do not depend on the core count.
"""

import sys

import torch

torch.backends.mkldnn.enabled = False
torch.backends.nnpack.set_flags(False)

from esper.cli.main import main  # noqa: E402  (the backends are switched before esper builds a model)

sys.exit(main(sys.argv[1:]))
