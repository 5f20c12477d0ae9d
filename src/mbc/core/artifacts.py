"""Atomic artefact I/O: every file is written to a temporary sibling, then renamed.

A reader never sees a half-written file: `os.replace` is atomic on POSIX within one
filesystem, so a killed job leaves either the old file or the new one. Readers check
what they load and raise `CorruptArtifactError` naming the file instead of returning
garbage.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd

_UMASK = os.umask(0)
os.umask(_UMASK)


class CorruptArtifactError(RuntimeError):
    """An artefact on disk is truncated, unreadable or does not have the expected shape.

    `path` is the bad file; `invalidate` lists what must be regenerated with it (moved
    aside by `mbc.workflow.job_log.logged`, so the next workflow run rebuilds it and nothing is lost).
    """

    def __init__(self, message: str, path=None, invalidate=()):
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.invalidate = [Path(p) for p in invalidate] or ([self.path] if path else [])


def _atomic_write(path: str | os.PathLike, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; artefacts are shared files
        os.replace(tmp, path)
    except OSError as exc:  # a full disk names no file: name the artefact
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    _atomic_write(path, data)


def unwritable(directory: str | os.PathLike) -> str | None:
    """Why nothing can be written under `directory` (created if missing), or None: a real
    write, not `os.access`, which says yes to root on a read-only file system."""
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".mbc-write-test-"):
            pass
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    _atomic_write(path, text.encode("utf-8"))


def strict(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN: not measured; inf) as None, so that it is
    strict JSON: `json.dumps` would otherwise write the bare tokens NaN and Infinity, which
    no standard JSON reader accepts. numpy scalars become Python numbers."""
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and getattr(obj, "ndim", None) == 0:
        obj = obj.item()  # numpy / torch scalar
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def dumps_strict(obj: Any, **kw) -> str:
    """Every JSON the pipeline writes: non-finite numbers as null (`strict`), and
    `allow_nan=False` so that one left over is an error, never a bare NaN."""
    return json.dumps(strict(obj), allow_nan=False, **kw)


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    _write_table(path, dumps_strict(obj, indent=2, sort_keys=True) + "\n")


def write_csv_atomic(path: str | os.PathLike, df: pd.DataFrame) -> None:
    _write_table(path, df.to_csv(index=False, lineterminator="\n"))


_BUILT_FROM: list[list[Path]] = []  # the inputs of the `built_from` block in force (innermost last)
_BUILT_UNDER: list[str] = []  # the config id of the `built_under` block in force
CONFIG = "@config"  # a sidecar's line for the config sections its rule read (no file's name)


@contextlib.contextmanager
def built_from(inputs: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Every table written inside the block records, in its sidecar, the inputs it was
    built from (a rule's inputs) with their checksums: a table copied in from another
    outdir together with its sidecar names inputs that are not this outdir's."""
    _BUILT_FROM.append([Path(p) for p in inputs])
    try:
        yield
    finally:
        _BUILT_FROM.pop()


@contextlib.contextmanager
def built_under(config_id: str | None) -> Iterator[None]:
    """Every table written inside the block records, in its sidecar, the content id of the
    config sections its rule read (the rule's `config_id`, `mbc.core.frozen.content_id`):
    the start-up check compares it with the config of the invocation, so that a table built
    under other settings is rebuilt whatever the path's spelling or the state of Snakemake's
    own records (`.snakemake/`, which a fresh clone does not have)."""
    _BUILT_UNDER.append(config_id or "")
    try:
        yield
    finally:
        _BUILT_UNDER.pop()


def config_digest(config_id: str) -> str:
    """A config id as a sidecar line records it (64 hex digits, as every line's digest)."""
    return hashlib.sha256(config_id.encode()).hexdigest()


def _write_table(path: str | os.PathLike, text: str) -> None:
    """A table and then its `.sha256` sidecar: a table cut or edited after it was written
    no longer matches, and the start-up check rebuilds it (`mbc.workflow.integrity`). A kill
    between the two writes leaves a mismatch too: rebuilt, never trusted. Inside
    `built_from`, the sidecar names the inputs too; inside `built_under`, the config."""
    data = text.encode("utf-8")
    _atomic_write(path, data)
    seal(path, hashlib.sha256(data).hexdigest())


def write_text_table(path: str | os.PathLike, text: str) -> None:
    """A generated text file (a LaTeX table, numbers.tex) with its sidecar, as a table."""
    _write_table(path, text)


def seal(path: str | os.PathLike, digest: str | None = None) -> None:
    """Write the sidecar of a file already written (a figure, the PDF): its sha256, its
    identity and, inside `built_from` / `built_under`, its inputs and config."""
    root = outdir_of(path)
    inputs = [
        (digest_of(p), os.path.relpath(os.path.abspath(p), os.path.abspath(root)))
        for p in (_BUILT_FROM[-1] if _BUILT_FROM else [])
        if p.is_file()
    ]
    if _BUILT_UNDER and _BUILT_UNDER[-1]:
        inputs.append((config_digest(_BUILT_UNDER[-1]), CONFIG))
    write_sidecar_sha256(path, digest or sha256_file(path), identity_of(path), inputs)


def identity_of(path: str | os.PathLike) -> str:
    """What a table is, as its sidecar records it: a run's table with its run id
    (`runs/<run_id>/metrics.csv`), a diagnostic's with its kind and run
    (`diagnostics/hessian/<run_id>.csv`), else its name (`tau.csv`). A file copied over
    another's place together with its sidecar then names the wrong identity."""
    p = Path(path)
    if p.parent.parent.name in ("runs", "diagnostics"):
        return f"{p.parent.parent.name}/{p.parent.name}/{p.name}"
    # the report's sources and figures: `tex/numbers.tex`, `tex/tables/fits.tex`,
    # `figures/noise.pdf`, `paper/main.pdf` (the outdir's own PDF)
    for depth, parent in enumerate(p.parents):
        if depth < 2 and parent.name in ("tex", "figures", "paper"):
            return p.relative_to(parent.parent).as_posix()
    return p.name


def outdir_of(path: str | os.PathLike) -> Path:
    """The outdir a table lies in, by its identity: the paths a sidecar names (the table's
    identity, its inputs) are relative to it, whatever path reached the outdir."""
    return Path(path).parents[identity_of(path).count("/")]


def torch_save_atomic(path: str | os.PathLike, obj: Any) -> str:
    """Save with torch.save atomically; return the sha256 of the bytes written."""
    import torch  # lazily: table-only jobs (figures, fits) need not pay torch's import

    buf = io.BytesIO()
    torch.save(obj, buf)
    data = buf.getvalue()
    _atomic_write(path, data)
    return hashlib.sha256(data).hexdigest()


def sidecar(path: str | os.PathLike) -> Path:
    """`<file>.sha256`: the checksum of a file that has no index recording one (datasets,
    tables)."""
    return Path(f"{path}.sha256")


def write_sidecar_sha256(
    path: str | os.PathLike,
    digest: str,
    identity: str = "",
    inputs: Iterable[tuple[str, str]] = (),
) -> None:
    """`<digest>  <identity>` (sha256sum's layout): the bytes, and what they are (a
    dataset id, a run's table), so that a file swapped in with its own sidecar is found.
    A derived table adds a `<digest>  <input>` line per input it was built from (paths
    relative to its outdir, `outdir_of`): `sha256sum -c` in the outdir checks them all."""
    lines = [f"{digest}  {identity}".rstrip(), *(f"{d}  {rel}" for d, rel in inputs)]
    write_text_atomic(sidecar(path), "\n".join(lines) + "\n")


class Sidecar(NamedTuple):
    """What a sidecar records: the file's sha256, its identity (None in a sidecar written
    before identities were), the (sha256, path) of each input it was built from (none
    in a sidecar written before inputs were, or for a file built from no table), and the
    config it was built under (its `@config` line)."""

    digest: str
    identity: str | None
    inputs: tuple[tuple[str, str], ...] = ()
    config: str | None = None  # `config_digest` of the rule's config id (None: not recorded)


def read_sidecar(path: str | os.PathLike) -> Sidecar | None:
    """The record beside `path`, or None without a (readable, well-formed) sidecar."""
    try:
        lines = sidecar(path).read_text().strip().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    pairs = [line.partition("  ")[::2] for line in lines]
    if not pairs or any(len(d) != 64 for d, _ in pairs) or any(not r for _, r in pairs[1:]):
        return None
    (digest, identity), *inputs = pairs
    config = next((d for d, rel in inputs if rel == CONFIG), None)
    files = tuple((d, rel) for d, rel in inputs if rel != CONFIG)
    return Sidecar(digest, identity or None, files, config)


def read_sidecar_sha256(path: str | os.PathLike) -> str | None:
    """The recorded sha256 of `path`, or None without a (readable) sidecar."""
    return None if (rec := read_sidecar(path)) is None else rec[0]


def digest_of(path: str | os.PathLike) -> str:
    """A file's sha256 as its sidecar records it (cheap: no big file is read), or as its
    bytes give it where it has none."""
    return read_sidecar_sha256(path) or sha256_file(path)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def torch_load_checked(path: str | os.PathLike, *, sha256: str | None = None) -> Any:
    """Load a torch file; raise CorruptArtifactError on a checksum mismatch or a bad file."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise CorruptArtifactError(f"{path}: missing", path)
    if sha256 is not None and sha256_file(path) != sha256:
        raise CorruptArtifactError(f"{path}: checksum mismatch (truncated or modified)", path)
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises several types for truncated zips
        raise CorruptArtifactError(f"{path}: unreadable torch file ({exc})", path) from exc


def read_json_checked(path: str | os.PathLike, *, required: Iterable[str] = ()) -> dict:
    path = Path(path)
    try:
        obj = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CorruptArtifactError(f"{path}: unreadable JSON ({exc})", path) from exc
    missing = [k for k in required if k not in obj]
    if missing:
        raise CorruptArtifactError(f"{path}: missing keys {missing}", path)
    return obj


def read_csv_checked(
    path: str | os.PathLike, *, required: Iterable[str] = (), min_rows: int = 0
) -> pd.DataFrame:
    """Read a CSV table and check its columns and row count."""
    path = Path(path)
    try:
        with open(path, "rb") as f:  # our writer always ends a table with a newline
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    raise CorruptArtifactError(f"{path}: truncated (no final newline)", path)
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        df = pd.DataFrame()
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CorruptArtifactError(f"{path}: unreadable CSV ({exc})", path) from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise CorruptArtifactError(f"{path}: missing columns {missing}", path)
    if len(df) < min_rows:
        raise CorruptArtifactError(f"{path}: {len(df)} rows, expected at least {min_rows}", path)
    return df
