"""Worker processes for datasets written in Python: the child's side.

python/src/workers_*.cpp is the parent's side (workers_protocol.cpp its messages). A process is
started once per worker (and again after one dies) with multiprocessing's forkserver or spawn; it
unpickles the dataset once, runs worker_init_fn, then serves task records from its socket until
the socket closes, in C++ (python/src/worker_loop.cpp, _ferry._serve: Python runs only the
dataset's own code for a sample):

    task:   <QQQQQQQ index, sample seed, scratch bytes, where its state word lies in the
            scratch region, group, token, region> then <QQ> per field: the bytes it must write
            and where. Region 0 is the scratch region; another is a staging slot of the
            training process, mapped here (below), into which the sample goes straight.
    started: b"I" when it begins worker_init_fn (the parent's timeout counts from there), then
            b"R" when it is ready for tasks (whatever failed on the way, each task answers with)
    map:    <QQ region, bytes>, its memfd attached (SCM_RIGHTS): map it
    drop:   <Q region>: it was freed, let it go
    give back: <QQQ region, where its state word lies in the control region, token>: the
            training process let the batch in that staging slot go; its memory pages are freed
            (MADV_REMOVE), unless the training process called it off first (the state word, as
            a task's), so that an idle slot holds no memory
    answer: b"\\0" (the sample is written, or its task was cancelled), or
            b"\\1" <II len(text), len(traceback)> text traceback pickled-exception (_failure;
            b"\\2" in place of b"\\1" where the process's start failed)

The state word (workers.hpp, TaskState) is claimed after __getitem__ and before the first byte
is written, then marked done or failed; a task the training process cancelled first (its read
given up) writes nothing.

Messages use multiprocessing.Connection's framing (a 4-byte big-endian length). The parent
sends the tasks of a worker thread's share of a batch several at a time, in one write; the process
reads whatever has come in one read (recvmsg: a map message's descriptor comes with it). It
answers in groups: when `group` answers are ready (the
parent then has half of the window's places to give again), when no task is left to do, and at
once for a failure. The parent asks for groups of 1 where a timeout is set, so that a sample's
timeout counts its own time only. The scratch region is a memfd the parent sends over the
socket first (SCM_RIGHTS); the parent grows it as needed and says its size in each task.
"""

import collections
import io
import mmap
import multiprocessing
import os
import pickle
import re
import signal
import struct
import sys
import threading
import traceback
from multiprocessing import reduction

WorkerInfo = collections.namedtuple("WorkerInfo", "id count seed dataset")
WorkerInfo.__doc__ = """What ferry.worker_info() gives inside a worker process: its id (0 .. count - 1),
the number of worker processes, a seed derived from the loader's seed and the id, and this
process's copy of the dataset."""

_info = None
_FAILURE = struct.Struct("<II")


def _torch_worker_info(torch):
    """torch.utils.data.get_worker_info() answers in this process as in a torch DataLoader's
    worker (id, num_workers, seed, dataset), where torch is imported."""
    try:
        from torch.utils.data._utils import worker  # noqa: PLC0415

        worker._worker_info = worker.WorkerInfo(id=_info.id, num_workers=_info.count,
                                                seed=_info.seed, dataset=_info.dataset)
    except (ImportError, AttributeError, TypeError):
        pass  # a torch without it: get_worker_info() stays None


_sample_seed = None  # the seed of the sample being read, where seed_python is true


def _generator_seed(seed, generator):
    """py_dataset.cpp's generator_seed: one generator's seed from the sample's (torch: 3)."""
    mask = (1 << 64) - 1
    z = (seed + generator * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def _seed_torch(torch):
    """torch imported while a sample is read (by its __getitem__): its generator is seeded for
    that sample as the reader seeds it before each later one, so that the draws that follow in
    the same __getitem__ are the sample's own, as on ferry's threads."""
    generator = getattr(torch, "default_generator", None)
    if _sample_seed is not None and generator is not None:
        generator.manual_seed(_generator_seed(_sample_seed, 3))


class _TorchWatch:
    """On sys.meta_path while torch is not imported: when a __getitem__ (or anything) imports it,
    get_worker_info() answers from then on, that very call included. It stays there until torch
    is imported, not merely looked for (importlib.util.find_spec("torch"), as transformers'
    is_torch_available() does, finds the spec it patches and imports nothing)."""

    def __init__(self):
        self._busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self._busy:
            return None
        import importlib.util  # noqa: PLC0415

        self._busy = True  # the search below asks sys.meta_path again, this watch included
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._busy = False
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:
            return spec

        def exec_module(module):
            if self in sys.meta_path:
                sys.meta_path.remove(self)
            run(module)
            _torch_worker_info(module)
            _seed_torch(module)

        loader.exec_module = exec_module
        return spec


def _after_fork_in_child():
    """In a child of os.fork(): the forkserver that this process started is its parent's, not its
    own child (multiprocessing would wait for it and fail with ChildProcessError): forgotten, its
    descriptors closed, so that the child's first loader with processes starts one of its own and
    the parent's forkserver ends with the parent. The resource tracker is shared, as
    multiprocessing intends; its lock, like the forkserver's, may have been held by another
    thread at the fork."""
    from multiprocessing import forkserver, resource_tracker  # noqa: PLC0415

    server = getattr(forkserver, "_forkserver", None)
    if server is not None and getattr(server, "_forkserver_pid", None) is not None:
        alive = server._forkserver_alive_fd
        if alive is not None:
            try:
                os.close(alive)
            except OSError:
                pass
        # the socket's path stays: it is the parent's to unlink
        server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        # its temporary directory (where the socket was) is the parent's too, removed when the
        # parent exits: the child's forkserver gets one of its own
        multiprocessing.current_process()._config.pop("tempdir", None)
    rlock = type(threading.RLock())
    for owner in (server, getattr(resource_tracker, "_resource_tracker", None)):
        lock = getattr(owner, "_lock", None)
        if lock is not None:
            owner._lock = threading.RLock() if isinstance(lock, rlock) else threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def worker_info():
    """Inside one of a loader's worker processes: WorkerInfo(id, count, seed, dataset). Elsewhere
    (the training process, ferry's threads): None."""
    return _info


# numpy arrays of at least this many bytes go to the worker processes in shared memory, not in the
# dataset's pickle; at most SHARE_MOST of them (a descriptor each), the others in the pickle.
SHARE_BYTES = 1 << 20
SHARE_MOST = 256


class Packed:
    """A dataset pickled for the worker processes. Its numpy arrays of SHARE_BYTES or more are not
    in the pickle: each was copied once into a memfd (`fds`), which every worker maps
    copy-on-write, so that N processes hold one copy of the data, not N. An np.memmap of a file
    is opened again by the worker, as a copy-on-write mapping of the same file (mode "c"; "r" for
    one opened read-only). Closes its memfds when dropped (the workers keep their mappings)."""

    def __init__(self, dataset, share=True):
        self.fds = []
        self.shared_bytes = 0
        out = io.BytesIO()
        try:
            _Pickler(out, self if share else None).dump(dataset)
        except BaseException:
            self.close()
            raise
        self.data = out.getvalue()

    def close(self):
        fds, self.fds = self.fds, []
        for fd in fds:
            os.close(fd)

    def __del__(self):
        self.close()


class _Pickler(pickle.Pickler):
    def __init__(self, file, packed):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._packed = packed  # None: a trial (is the dataset picklable?), nothing is copied

    def reducer_override(self, obj):
        np = sys.modules.get("numpy")
        if np is None or not isinstance(obj, np.ndarray) or obj.dtype.hasobject:
            return NotImplemented
        if type(obj) is np.memmap:
            return _reduce_memmap(np, obj)
        if type(obj) is not np.ndarray or obj.nbytes < SHARE_BYTES:
            return NotImplemented
        if self._packed is None:
            return (_shared_array, (-1, obj.dtype, obj.shape, False))
        if len(self._packed.fds) >= SHARE_MOST:
            return NotImplemented
        fortran = obj.flags.f_contiguous and not obj.flags.c_contiguous
        data = obj.T if fortran else np.ascontiguousarray(obj)
        fd = os.memfd_create("ferry-dataset-array", os.MFD_CLOEXEC)
        try:
            view = memoryview(data.reshape(-1).view(np.uint8))
            done = 0
            while done < len(view):
                done += os.write(fd, view[done:done + (64 << 20)])
        except BaseException:
            os.close(fd)
            raise
        self._packed.fds.append(fd)
        self._packed.shared_bytes += obj.nbytes
        return (_shared_array, (len(self._packed.fds) - 1, obj.dtype, obj.shape, fortran))


def _reduce_memmap(np, obj):
    """An np.memmap that maps a file itself (not a view of another): opened again there."""
    base = obj.base
    filename = getattr(obj, "filename", None)
    if filename is None or not isinstance(base, mmap.mmap) or not (
            obj.flags.c_contiguous or obj.flags.f_contiguous):
        return NotImplemented
    mode = "r" if obj.mode == "r" else "c"
    order = "F" if obj.flags.f_contiguous and not obj.flags.c_contiguous else "C"
    return (np.memmap, (filename, obj.dtype, mode, obj.offset, obj.shape, order))


_shared_fds = []  # in a worker process, while its dataset is unpickled


def _shared_array(i, dtype, shape, fortran):
    np = sys.modules.get("numpy") or __import__("numpy")
    if i < 0 or i >= len(_shared_fds):
        raise RuntimeError("ferry: a shared array of the dataset is missing in this process")
    count = 1
    for n in shape:
        count *= n
    size = count * dtype.itemsize
    if size == 0:
        return np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    # Copy-on-write: the pages stay shared until this process writes to them, as after a fork.
    buffer = mmap.mmap(_shared_fds[i], size, flags=mmap.MAP_PRIVATE,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    array = np.frombuffer(buffer, dtype=dtype, count=count)
    if fortran:
        return array.reshape(tuple(reversed(shape))).T
    return array.reshape(shape)


def check_picklable(dataset):
    """Raises what pickling `dataset` for the worker processes would raise (nothing is copied)."""
    Packed(dataset, share=False)


def start(method, packed, worker_id, count, seed, layout, seed_python, init_fn,
          scratch_bytes, close_fds, control_fd=-1):
    """Starts one worker process. Returns (process, this side's socket descriptor, memfd)."""
    ctx = multiprocessing.get_context(method)
    ours, theirs = ctx.Pipe(duplex=True)
    # In a list the worker empties: its copy of the pickle goes once unpickled (the Process object
    # keeps its arguments for the process's life).
    process = ctx.Process(
        target=_main, name="ferry-worker-%d" % worker_id, daemon=True,
        args=(theirs, [packed.data, len(packed.fds)], worker_id, count, seed, layout,
              seed_python, init_fn, close_fds, control_fd >= 0, os.getpid()))
    # SIGINT blocked while the process starts: the process (and the forkserver, where it starts
    # here) inherit the blocked mask through fork and exec, so that a Ctrl-C at the terminal,
    # which reaches the whole process group, finds them ignoring it from their first instruction,
    # mid-import too (the worker unblocks it in _main, once ignored). The resource tracker is
    # started first: it blocks SIGINT around its own start and then unblocks it, which would
    # leave the forkserver's start unprotected.
    if method != "fork":
        from multiprocessing import resource_tracker  # noqa: PLC0415

        resource_tracker.ensure_running()
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        theirs.close()
    memfd = os.memfd_create("ferry-scratch", os.MFD_CLOEXEC)
    try:
        os.ftruncate(memfd, scratch_bytes)
        reduction.send_handle(ours, memfd, process.pid)
        if control_fd >= 0:
            reduction.send_handle(ours, control_fd, process.pid)
        for fd in packed.fds:
            reduction.send_handle(ours, fd, process.pid)
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


def _text(obj, what):
    """str(obj), or what it raised: a user's exception may fail at anything."""
    try:
        return str(obj)
    except BaseException as e:  # noqa: BLE001
        try:
            return "<%s: its str() raised %s>" % (what, type(e).__name__)
        except BaseException:  # noqa: BLE001
            return "<%s>" % what


def _failure(error, ferry_error):
    try:
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    except BaseException:  # noqa: BLE001 (a __str__ that raises, a traceback that cannot print)
        trace = "Traceback unavailable: %s" % type(error).__name__
    trace = trace.encode("utf-8", "replace")
    if isinstance(error, ferry_error):
        # ferry's own error about the sample (a value that does not fit its field): raised as the
        # loader's DataError with its own text, as on threads (nothing pickled follows).
        text = _text(error, "error").encode("utf-8", "replace")
        return b"\1" + _FAILURE.pack(len(text), len(trace)) + text + trace
    text = ("%s: %s" % (type(error).__name__, _text(error, "exception"))).encode(
        "utf-8", "replace")
    try:
        pickled = pickle.dumps(error)
        pickle.loads(pickled)  # an exception that cannot come back becomes a RuntimeError
    except BaseException:  # noqa: BLE001 (any pickling failure)
        pickled = pickle.dumps(RuntimeError(text.decode("utf-8")))
    return b"\1" + _FAILURE.pack(len(text), len(trace)) + text + trace + pickled


def _watch(trainer):
    """Ends this process when the training process `trainer` ends, however it ends (SIGKILL
    too) and whatever this process is doing (a long __getitem__ too, in C code holding the GIL
    too): a thread of the extension's that never takes the GIL waits on a pidfd of it
    (_ferry._watch_trainer), in a descriptor table of its own, so that this process's file
    syscalls stay those of a single thread.

    A process stopped (SIGSTOP) runs no thread: there the forkserver ends it. A child of the
    forkserver is given the training process's end of the forkserver's "alive" pipe, which kept
    the forkserver up while the child lived; closed here, the forkserver exits with the training
    process, and its exit kills this process (PR_SET_PDEATHSIG, its only thread being the one
    that forked it). Not so under spawn: there the parent is the thread that made the loader,
    and the death signal would follow that thread."""
    from multiprocessing import forkserver  # noqa: PLC0415

    from . import _ferry  # noqa: PLC0415 (the extension, in the child)

    parent = 0
    server = getattr(forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:  # started by the forkserver (the forkserver's _serve_one set it)
        try:
            os.close(alive)
        except OSError:
            pass
        # a forkserver this process needs (its own loaders) is one of its own
        server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
        parent = os.getppid()
    if not _ferry._watch_trainer(trainer, parent):
        os._exit(1)  # already gone


def _main(conn, packed, worker_id, count, seed, layout, seed_python, init_fn, close_fds,
          has_control, trainer):
    global _info, _sample_seed
    # Ctrl-C is the training process's to handle: it stops the workers.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked since start()
    _watch(trainer)
    for fd in close_fds:  # "fork" only: the other workers' sockets, so that their ends close
        try:
            os.close(fd)
        except OSError:
            pass
    from . import _ferry  # noqa: PLC0415 (the extension, in the child)

    _ferry._worker_prepare()
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = "1"
    memfd = reduction.recv_handle(conn)
    # the state words of the give-backs of slots' pages (_ferry._serve maps it and closes it)
    control_fd = reduction.recv_handle(conn) if has_control else -1
    pickled, shared = packed.pop(0), packed.pop(0)
    failure = None
    reader = None
    try:
        _shared_fds[:] = [reduction.recv_handle(conn) for _ in range(shared)]
        try:
            dataset = pickle.loads(pickled)
        finally:
            del pickled
            for fd in _shared_fds:  # the arrays keep their mappings
                os.close(fd)
            _shared_fds.clear()
        _info = WorkerInfo(worker_id, count, seed, dataset)
        # torch is here if the dataset's module imports it (unpickling imported that module):
        # then its generator is seeded before every sample, as in the training process. A
        # process that never imports it keeps its memory (a few hundred MB in each process).
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)
            _torch_worker_info(torch)
        if init_fn is not None:
            conn.send_bytes(b"I")  # the parent's timeout counts from here
            init_fn(worker_id)
            if torch is None and sys.modules.get("torch") is not None:
                _torch_worker_info(sys.modules["torch"])  # worker_init_fn imported it
        reader = _ferry._WorkerReader(dataset, layout, seed_python)
    except BaseException as error:  # noqa: BLE001 (every task answers with it)
        failure = error
    try:
        conn.send_bytes(b"R")  # started: tasks may come
    except OSError:
        return
    if failure is None and "torch" not in sys.modules:
        sys.meta_path.insert(0, _TorchWatch())
    try:
        # The loop (python/src/worker_loop.cpp): Python runs only the dataset's code per sample.
        _ferry._serve(reader, conn.fileno(), memfd, control_fd, failure, len(layout[0]),
                      sys.modules[__name__], _ferry.Error)
    finally:
        try:
            os.close(memfd)
        except OSError:  # a __getitem__ that closed every descriptor
            pass
