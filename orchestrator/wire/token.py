"""The coordinator's bearer token: one secret in a 0600 file, shared with the CLI.

Every coordinator of a job must hold the same token, or a failover locks the processors
and operators out: `baton token` writes the file once (`write_token`), and the operator
copies it to every host. A coordinator that finds no file at start creates one of its
own, which suits a single host; everyone else only reads it. A file that others can
read is refused rather than repaired: someone may already have copied it.
Group read is accepted when the file's group is one of this process's own: a
Kubernetes secret volume mounted with `fsGroup` gives every file exactly that (group
read, owner root), and only the pod's processes are in that group.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

__all__ = ["TokenError", "is_private", "load_or_create_token", "read_token", "write_token"]

# 32 random bytes, URL-safe: unguessable and easy to pass in a header.
_TOKEN_BYTES = 32
_PRIVATE = 0o600


class TokenError(RuntimeError):
    """The token file is missing, unreadable, empty or too open; the message names it."""


def is_private(status: os.stat_result) -> bool:
    """A secret file's rule (token, `[kafka]` secrets): no bits for others; for the
    group none, or read only when the group is one of this process's own."""
    mode = status.st_mode
    if mode & stat.S_IRWXO:
        return False
    group = mode & stat.S_IRWXG
    return not group or (group == stat.S_IRGRP and _own_group(status.st_gid))


def _own_group(gid: int) -> bool:
    return gid == os.getegid() or gid in os.getgroups()


def load_or_create_token(path: Path) -> str:
    """The daemon's side: create `path` (mode 0600) when missing, then read it.

    Raises:
        TokenError: the file is group/world accessible, empty or unreadable.
    """
    if not path.exists():
        _create_token_file(path)
    return read_token(path)


def write_token(path: Path, force: bool = False) -> bool:
    """The operator's side (`baton token`): write a fresh token to `path`, mode 0600.

    Args:
        path: the token file; its folder is created when missing.
        force: replace an existing file (a rotation: coordinators take the new token on
            SIGHUP, docs/operations.md "Security").

    Returns:
        True when a token was written, False when the file existed and was kept.

    Raises:
        TokenError: the file or its folder cannot be written.
    """
    if path.exists() and not force:
        return False
    if force:
        _replace_token_file(path)
        return True
    _create_token_file(path)
    return True


def _private_tmp(path: Path) -> Path:
    """A new private file beside `path` holding a fresh token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PRIVATE)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secrets.token_urlsafe(_TOKEN_BYTES) + "\n")
    return tmp


def _replace_token_file(path: Path) -> None:
    """Put a fresh token in place of `path` in one rename: readers see the old or the
    new token, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp = _private_tmp(path)
        os.replace(tmp, path)
    except OSError as exc:
        raise TokenError(f"cannot write the token file {path}: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def _create_token_file(path: Path) -> None:
    """Write a fresh token to a private temporary file, then link it into place.

    Readers never see the file half-written: it appears with its content or not at all.
    A concurrent creator that wins the link keeps its token; ours is discarded.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise TokenError(f"cannot create the folder of the token file {path}: "
                         f"{exc.strerror}") from exc
    try:
        tmp = _private_tmp(path)
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process created it first: use theirs
    except OSError as exc:
        raise TokenError(f"cannot create the token file {path}: {exc.strerror}") from exc
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def read_token(path: Path) -> str:
    """Read the token, refusing a file that group or others may access.

    Raises:
        TokenError: naming the file and what to do.
    """
    try:
        status = path.stat()
        if not is_private(status):
            raise TokenError(
                f"token file {path} is accessible by others or by a group not this "
                f"process's (mode {stat.S_IMODE(status.st_mode):04o}); run 'chmod 600 "
                f"{path}', or delete it to get a new token on the next coordinator start")
        token = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise TokenError(f"token file {path} not found: create it with 'baton token -c "
                         f"job.toml' and copy it to every host (or start the coordinator "
                         f"once), or fix coordinator.token_file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read token file {path}: {exc}") from exc
    if not token:
        raise TokenError(f"token file {path} is empty; delete it and restart the coordinator")
    return token
