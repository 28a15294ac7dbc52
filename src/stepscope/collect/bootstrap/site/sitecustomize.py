"""stepscope's ``sitecustomize``: profile this Python process when ``stepscope run`` started it.

``stepscope run`` puts this folder first on ``PYTHONPATH``; Python imports this module at start-up.
It installs the instrumentation only when ``STEPSCOPE_JOB_DIR`` is set, then runs the
``sitecustomize`` that would have run without us (the next one on ``sys.path``), if any.
"""

import os
import sys


def _install_stepscope() -> None:
    if not os.environ.get("STEPSCOPE_JOB_DIR"):
        return
    try:
        from stepscope.collect.bootstrap import install
    except ImportError as exc:  # the command runs a Python of another environment
        sys.stderr.write(
            f"stepscope: not profiling this process: {sys.executable} cannot import stepscope "
            f"({exc}); install stepscope where the command's Python finds it\n"
        )
        return
    install()


def _chain_to_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install_stepscope()
_chain_to_next_sitecustomize()
