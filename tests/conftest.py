"""Shared fixtures: float64 on demand and seeded random CMDPs; one compilation cache per run.

**Compilation cache.** The suite's time is mostly XLA compilation, and different tests compile
some of the same programs (the same learner on the same small task, in this process or in a
CLI, notebook or distributed subprocess). Each run therefore gives JAX's persistent
compilation cache a fresh temporary directory, shared by the pytest-xdist workers and, through
``JAX_COMPILATION_CACHE_DIR``, by the subprocesses they start; it is removed when the run
ends. The cached executable is the compiled one, so numbers are unchanged. A run starts
empty, so its timing stays honest. ``FHC_JAX_TEST_JIT_CACHE=0`` turns the cache off; a
``JAX_COMPILATION_CACHE_DIR`` set by the user is left alone.

**Compiled for the tests, not for speed.** About 80% of the suite's time is XLA compiling
small programs that then run for milliseconds, so the tests ask XLA's CPU backend for its
lowest optimisation level (``--xla_backend_optimization_level=0`` appended to ``XLA_FLAGS``,
for this process, the xdist workers and their subprocesses): the same programs, compiled
about twice as fast, with float rounding that may differ in the last bits. What users get is
still checked bit for bit: a test marked ``as_users_compile`` (the pinned-learner numbers, and
equivalences that a discontinuous step such as CPO's line search would turn from last-bit
rounding into other iterates) runs in a fresh interpreter with the ``XLA_FLAGS`` the run
started with. ``FHC_JAX_TEST_FAST_COMPILE=0`` compiles everything as users do.
"""

import os

FAST_COMPILE_FLAG = "--xla_backend_optimization_level=0"
#: the XLA_FLAGS the run was started with (what users compile with), for the pinned numbers
USER_XLA_FLAGS = os.environ.get("FHC_JAX_TEST_USER_XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
if os.environ.get("FHC_JAX_TEST_FAST_COMPILE", "1") != "0" and FAST_COMPILE_FLAG not in os.environ.get("XLA_FLAGS", ""):
    # before jax creates its CPU client (XLA reads XLA_FLAGS once, then)
    os.environ["FHC_JAX_TEST_USER_XLA_FLAGS"] = USER_XLA_FLAGS
    os.environ["XLA_FLAGS"] = f"{USER_XLA_FLAGS} {FAST_COMPILE_FLAG}".strip()

import shutil  # noqa: E402 (after XLA_FLAGS is set)
import subprocess
import sys
import tempfile

import jax
import pytest

_CACHE_KEY = "fhc_jax_jit_cache"


def _cache_wanted() -> bool:
    return os.environ.get("FHC_JAX_TEST_JIT_CACHE", "1") != "0"


def pytest_configure(config):
    """The controller (or a run without xdist) makes the run's cache directory; each xdist
    worker receives it through ``workerinput`` (:func:`pytest_configure_node`); subprocesses
    inherit it through the environment."""
    if not _cache_wanted():
        return
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        if os.environ.get("JAX_COMPILATION_CACHE_DIR"):  # the user's own cache: left alone
            return
        config._fhc_jit_cache = tempfile.mkdtemp(prefix="fhc_jax_test_jit_cache_")
        directory = config._fhc_jit_cache
    else:
        directory = workerinput.get(_CACHE_KEY)
    if directory:
        jax.config.update("jax_compilation_cache_dir", directory)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.3)
        os.environ["JAX_COMPILATION_CACHE_DIR"] = directory
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0.3"


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: absent without xdist (then no workers)
def pytest_configure_node(node):
    """Called on the controller for each xdist worker: hand it the run's cache directory."""
    directory = getattr(node.config, "_fhc_jit_cache", None)
    if directory:
        node.workerinput[_CACHE_KEY] = directory


def pytest_unconfigure(config):
    directory = getattr(config, "_fhc_jit_cache", None)
    if directory:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def x64():
    """Run a test with 64-bit JAX types (exact-solver comparisons)."""
    with jax.enable_x64(True):
        yield


def _fast_compile() -> bool:
    return FAST_COMPILE_FLAG in os.environ.get("XLA_FLAGS", "") and FAST_COMPILE_FLAG not in USER_XLA_FLAGS


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A test marked ``as_users_compile`` runs in a fresh pytest process compiled with the
    run's original ``XLA_FLAGS`` (module docstring) while this process compiles fast."""
    if pyfuncitem.get_closest_marker("as_users_compile") is None or not _fast_compile():
        return None
    env = dict(os.environ, FHC_JAX_TEST_FAST_COMPILE="0", XLA_FLAGS=USER_XLA_FLAGS)
    env.pop("FHC_JAX_TEST_USER_XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "slow or not slow", pyfuncitem.nodeid],
        cwd=pyfuncitem.config.rootpath,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if proc.returncode != 0:
        pytest.fail(f"failed when compiled as users compile:\n{(proc.stdout + proc.stderr)[-4000:]}", pytrace=False)
    return True
