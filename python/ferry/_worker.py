"""Worker processes for datasets written in Python: the child's side.

python/src/workers.cpp is the parent's side. A process is started once per worker (and again
after one dies) with multiprocessing's forkserver or spawn; it unpickles the dataset once, runs
worker_init_fn, then serves task records from its socket until the socket closes:

    task:   <QQQQ index, sample seed, scratch bytes, where its fields begin> then <Q> per field:
            the bytes it must write
    answer: b"\\0" (the fields are in the scratch region from there, each at a 64-byte aligned
            offset), or
            b"\\1" <II len(text), len(traceback)> text traceback pickled-exception

Messages use multiprocessing.Connection's framing (a 4-byte big-endian length). The scratch region
is a memfd the parent sends over the socket first (SCM_RIGHTS); the parent grows it as needed and
says its size in each task.
"""

import collections
import mmap
import multiprocessing
import os
import pickle
import re
import signal
import struct
import sys
import traceback
from multiprocessing import reduction

WorkerInfo = collections.namedtuple("WorkerInfo", "id count seed dataset")
WorkerInfo.__doc__ = """What ferry.worker_info() gives inside a worker process: its id (0 .. count - 1),
the number of worker processes, a seed derived from the loader's seed and the id, and this
process's copy of the dataset."""

_info = None
_TASK = struct.Struct("<QQQQ")
_FAILURE = struct.Struct("<II")


def worker_info():
    """Inside one of a loader's worker processes: WorkerInfo(id, count, seed, dataset). Elsewhere
    (the training process, ferry's threads): None."""
    return _info


def start(method, pickled, worker_id, count, seed, layout, seed_python, init_fn,
          scratch_bytes, close_fds):
    """Starts one worker process. Returns (process, this side's socket descriptor, memfd)."""
    ctx = multiprocessing.get_context(method)
    ours, theirs = ctx.Pipe(duplex=True)
    process = ctx.Process(
        target=_main, name="ferry-worker-%d" % worker_id, daemon=True,
        args=(theirs, pickled, worker_id, count, seed, layout, seed_python, init_fn, close_fds))
    try:
        process.start()
    finally:
        theirs.close()
    memfd = os.memfd_create("ferry-scratch", os.MFD_CLOEXEC)
    try:
        os.ftruncate(memfd, scratch_bytes)
        reduction.send_handle(ours, memfd, process.pid)
    except BaseException:
        os.close(memfd)
        ours.close()
        process.kill()
        process.join()
        raise
    fd = os.dup(ours.fileno())
    ours.close()
    return process, fd, memfd


def _has_main_guard(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            source = f.read()
    except OSError:
        return True  # not ours to judge
    return re.search(r"""__name__\s*==\s*['"]__main__['"]""", source) is not None


def unpicklable_here(dataset):
    """Why worker processes (forkserver, spawn) cannot take `dataset` here, or None.

    Each worker process imports the training script's module as multiprocessing's forkserver and
    spawn do, to find what the dataset's pickle names from it: a script without an
    `if __name__ == "__main__":` guard would run again in each. And a class defined in a __main__
    with no file (python -c, stdin, a notebook) cannot be found there at all."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    cls = type(dataset)
    if path is None:
        if cls.__module__ == "__main__":
            return ("its class %s is defined in __main__, which has no file (python -c, stdin or "
                    "a notebook): a worker process cannot import it; define it in a module"
                    % cls.__name__)
        return None
    if not _has_main_guard(path):
        return ("the script %s has no `if __name__ == \"__main__\":` guard: each worker process "
                "imports it (as multiprocessing's forkserver and spawn do) and would run it "
                "again; put the training under the guard" % path)
    return None


def _failure(error, ferry_error):
    text = ("%s: %s" % (type(error).__name__, error)).encode("utf-8", "replace")
    trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    trace = trace.encode("utf-8", "replace")
    if isinstance(error, ferry_error):
        # ferry's own error about the sample (a value that does not fit its field): raised as the
        # loader's DataError, as on threads.
        return b"\1" + _FAILURE.pack(len(text), len(trace)) + text + trace
    try:
        pickled = pickle.dumps(error)
        pickle.loads(pickled)  # an exception that cannot come back becomes a RuntimeError
    except Exception:  # noqa: BLE001 (any pickling failure)
        pickled = pickle.dumps(RuntimeError(text.decode("utf-8")))
    return b"\1" + _FAILURE.pack(len(text), len(trace)) + text + trace + pickled


def _main(conn, pickled, worker_id, count, seed, layout, seed_python, init_fn, close_fds):
    global _info
    # Ctrl-C is the training process's to handle: it stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for fd in close_fds:  # "fork" only: the other workers' sockets, so that their ends close
        try:
            os.close(fd)
        except OSError:
            pass
    from . import _ferry  # noqa: PLC0415 (the extension, in the child)

    _ferry._worker_prepare()  # ends with its parent (PR_SET_PDEATHSIG)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    memfd = reduction.recv_handle(conn)
    failure = None
    reader = None
    try:
        dataset = pickle.loads(pickled)
        _info = WorkerInfo(worker_id, count, seed, dataset)
        # torch is here if the dataset's module imports it (unpickling imported that module):
        # then its generator is seeded before every sample, as in the training process. A
        # process that never imports it keeps its memory (a few hundred MB in each process).
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)
        if init_fn is not None:
            init_fn(worker_id)
        reader = _ferry._WorkerReader(dataset, layout, seed_python)
    except BaseException as error:  # noqa: BLE001 (every task answers with it)
        failure = error
    try:
        conn.send_bytes(b"R")  # started: tasks may come
    except OSError:
        return
    scratch = None
    size = 0
    fields = len(layout[0])
    sizes_format = struct.Struct("<%dQ" % fields)
    while True:
        try:
            task = conn.recv_bytes()
        except (EOFError, OSError):
            break
        index, sample_seed, want, base = _TASK.unpack_from(task)
        sizes = sizes_format.unpack_from(task, _TASK.size)
        try:
            if failure is not None:
                raise failure
            if want != size:
                if scratch is not None:
                    scratch.close()
                scratch = mmap.mmap(memfd, want)
                size = want
            reader.read(index, sample_seed, scratch, base, sizes)
            answer = b"\0"
        except BaseException as error:  # noqa: BLE001 (the parent raises it)
            answer = _failure(error, _ferry.Error)
        try:
            conn.send_bytes(answer)
        except OSError:
            break
    if scratch is not None:
        scratch.close()
    os.close(memfd)
