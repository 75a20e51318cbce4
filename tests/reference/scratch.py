"""A directory for a reference test's files (inputs, outputs, worker specs), removed when the
script exits, however it exits: the tests run on every CI machine and developer's checkout, and
their files would otherwise pile up in the temporary directory run after run."""
import atexit
import shutil
import tempfile


def scratch_dir(prefix):
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path
