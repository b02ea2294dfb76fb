"""The compiled helpers under AddressSanitizer and UBSan: the extensions
built with ``-fsanitize=address,undefined`` into a temporary copy of the
package, and the decoder tests that feed them hostile input (the fuzz tests,
the compiled decoder's and reader's mutation tests, the crop tests, the
crafted windows, random and mutated JPEG headers (the marker walk, libjpeg its oracle), varints
and index rows of test_c_safety.py, unaligned indexes of test_compiled_read.py and
test_c_safety.py) run against that copy in a subprocess. Any read or write outside a buffer, or undefined behaviour, aborts
the run. ``PYTHONMALLOC=malloc`` puts Python's small objects (bytes, arrays)
on the allocator ASan watches, so overruns of them are seen too."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
FLAGS = "-fsanitize=address,undefined -fno-omit-frame-pointer -g"
MODULES = ("tfrecord_torch.example._fastwire", "tfrecord_torch.records._frames", "tfrecord_torch.features.images._jpegcrop")
TESTS = ["scenarios/test_fuzz.py", "unit/example/test_fastwire.py", "unit/example/test_compiled_read.py",
         "unit/features/images/test_jpeg.py", "scenarios/test_c_safety.py"]

RUN = """
import importlib, sys
for name in sys.argv[2].split(","):
    module = importlib.import_module(name)
    if not module.__file__.startswith(sys.argv[1]):
        sys.exit(f"{name} imported from {module.__file__}, not the sanitized build")
    print("sanitized:", name, module.__file__)
import pytest
sys.exit(pytest.main(sys.argv[3:]))
"""


def runtime(name: str) -> str | None:
    """The path of gcc's runtime library ``name``, or None if gcc or it is absent."""
    if shutil.which("gcc") is None:
        return None
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory):
    """A copy of the package with the extensions built under the sanitizers."""
    libasan = runtime("libasan.so")
    if libasan is None or runtime("libubsan.so") is None:
        pytest.skip("gcc with libasan and libubsan is needed (Debian: gcc, which ships both)")
    top = tmp_path_factory.mktemp("sanitized")
    lib = top / "lib"
    shutil.copytree(ROOT / "tfrecord_torch", lib / "tfrecord_torch",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    env = dict(os.environ, CFLAGS=FLAGS, LDFLAGS="-fsanitize=address,undefined")
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--build-lib", str(lib),
                            "--build-temp", str(top / "build")], cwd=ROOT, env=env, capture_output=True, text=True)
    built = {name: next((lib / name.replace(".", "/")).parent.glob(name.rsplit(".", 1)[1] + ".*.so"), None)
             for name in MODULES}
    # _jpegcrop is optional (libjpeg's headers); _fastwire needs only numpy's, which the tests have
    if built[MODULES[0]] is None:
        pytest.fail(f"the sanitized _fastwire did not build:\n{build.stdout[-3000:]}\n{build.stderr[-3000:]}")
    for path in built.values():
        assert path is None or b"__asan_report" in path.read_bytes(), f"{path} is not instrumented"
    return lib, libasan, [name for name, path in built.items() if path is not None]


def test_decoder_tests_pass_under_asan_and_ubsan(sanitized, tmp_path):
    lib, libasan, modules = sanitized
    # libstdc++ preloaded too: ASan resolves its __cxa_throw interceptor at start-up, and torch's
    # C++ exceptions abort the process when it is loaded later
    preload = " ".join(filter(None, [libasan, runtime("libstdc++.so")]))
    env = dict(os.environ, LD_PRELOAD=preload, PYTHONMALLOC="malloc", PYTHONPATH=str(lib),
               ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    tests = [str(ROOT / "tests" / name) for name in TESTS]
    # -s: a sanitizer ends the process at once, so its report must not sit in pytest's capture
    run = subprocess.run([sys.executable, "-c", RUN, str(lib), ",".join(modules), "-q", "-s", "-n", "0",
                          "-p", "no:cacheprovider", "-p", "no:faulthandler", "--rootdir", str(ROOT), *tests],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    output = f"{run.stderr[:10000]}\n{run.stdout[-4000:]}"
    assert run.returncode == 0, output
    for name in modules:
        assert f"sanitized: {name} {lib}" in run.stdout, output
    assert " passed" in run.stdout and "runtime error:" not in run.stderr, output
