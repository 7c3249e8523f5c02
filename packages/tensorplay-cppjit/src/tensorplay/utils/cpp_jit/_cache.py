"""The build cache: one folder per (name, content key), trusted only through its manifest.

Layout under ``cache_root()`` (``$TENSORPLAY_CACHE_DIR/cpp_jit`` or
``~/.cache/tensorplay/cpp_jit``, created with mode 0700)::

    <name>_<key[:16]>/
        <name>.so        the library, published by an atomic rename
        manifest.json    {"key": <full content key>, "sha256": <library hash>, "size": n}
        .lock            serialises builds of this entry across processes
        failed/          the last failed build's sources and ninja file, for inspection

A library is loaded only when the manifest's key is the one asked for and the file's
size and SHA-256 match the manifest: a planted, stale or truncated file is rebuilt,
never loaded. The manifest is written last (also by rename), so a crash mid-build
leaves an entry that simply does not verify.

A manifest only helps while nobody else can write the folder: whoever can plant a library
can write its manifest too. So, as ssh does with ``~/.ssh``, a cache folder (and every
folder above it) owned by another user, or writable by group or others without the
sticky bit, is refused with a ``PermissionError``; nothing in it is loaded or built.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

MANIFEST = "manifest.json"


def cache_root() -> Path:
    """Where builds are cached; ``TENSORPLAY_CACHE_DIR`` overrides the per-user default."""
    base = os.environ.get("TENSORPLAY_CACHE_DIR")
    root = Path(base) if base else Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "tensorplay"
    root = root.expanduser() / "cpp_jit"
    try:
        make_private_dir(root)
    except OSError as exc:
        raise PermissionError(
            f"cpp_jit: cannot create the build cache folder {root} ({exc.strerror}); "
            "point TENSORPLAY_CACHE_DIR at a writable folder"
        ) from exc
    check_private(root, "the build cache folder")
    return root


def check_private(folder: Path, what: str) -> None:
    """Refuse ``folder`` if a user other than us (and root) could change what is in it.

    ``folder`` must be ours and not group/world-writable; each folder above it must be
    ours or root's, and group/world-writable only with the sticky bit (as ``/tmp``), where
    others cannot rename or delete what we own.
    """
    uid = os.geteuid()
    path = folder.resolve()
    for p in (path, *path.parents):
        st = os.stat(p)
        problem = _not_private(st, uid, above=p != path)
        if problem:
            fix = f"chown {uid} {p} && chmod go-w {p}"
            raise PermissionError(
                f"cpp_jit: refusing {what} {path}: {p} {problem} (mode "
                f"{stat.S_IMODE(st.st_mode):o}), so another user could plant a library there "
                f"that cpp_jit would load. Use a folder only you can write (set "
                f"TENSORPLAY_CACHE_DIR), or, if you trust this one, `{fix}`"
            )


def _not_private(st: os.stat_result, uid: int, above: bool) -> str | None:
    """Why a folder (``above``: a folder above the one we use) fails ``check_private``."""
    if st.st_uid != uid and not (above and st.st_uid == 0):
        owner = "neither you nor root" if above else "not you"
        return f"is owned by uid {st.st_uid}, {owner} (you are uid {uid})"
    if st.st_mode & 0o022 and not (above and st.st_mode & stat.S_ISVTX):
        return "is writable by its group or by everyone" + (
            " without the sticky bit" if above else ""
        )
    return None


def make_private_dir(path: Path) -> None:
    # mkdir(mode=) is filtered by the umask and skips existing parents: create each
    # missing level ourselves so every folder we make is 0700 (others cannot plant files).
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process made it first
            folder.mkdir(mode=0o700)
            os.chmod(folder, 0o700)


def content_key(parts: dict) -> str:
    """SHA-256 over everything that determines the library's bytes."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()


def entry_dir(name: str, key: str) -> Path:
    return cache_root() / f"{name}_{key[:16]}"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verified(entry: Path, library: str, key: str) -> Path | None:
    """The entry's library if its manifest vouches for exactly these bytes, else None.

    Raises ``PermissionError`` when the entry folder exists but is not private.
    """
    if entry.exists():
        check_private(entry, "the build cache entry")
    lib = entry / library
    try:
        manifest = json.loads((entry / MANIFEST).read_text())
        if manifest.get("key") != key or lib.stat().st_size != manifest.get("size"):
            return None
        return lib if file_sha256(lib) == manifest.get("sha256") else None
    except (OSError, ValueError):  # missing, unreadable or corrupt: not trusted
        return None


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def publish(entry: Path, built: Path, library: str, key: str) -> Path:
    """Move a freshly built library into the entry and vouch for it in the manifest."""
    target = entry / library
    # Drop the old manifest first: between the rename and the new manifest nobody trusts
    # the entry. A new inode (rename, not overwrite) keeps processes that already
    # mapped an older library safe.
    with contextlib.suppress(FileNotFoundError):
        (entry / MANIFEST).unlink()
    os.replace(built, target)
    manifest = {"key": key, "sha256": file_sha256(target), "size": target.stat().st_size}
    atomic_write(entry / MANIFEST, json.dumps(manifest).encode())
    return target


@contextlib.contextmanager
def locked(entry: Path) -> Iterator[None]:
    """Exclusive, cross-process lock on one cache entry (released if the process dies)."""
    make_private_dir(entry)
    check_private(entry, "the build cache entry")
    with open(entry / ".lock", "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
