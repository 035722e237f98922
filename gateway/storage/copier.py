"""The copier: one file from a source storage to a destination storage, verified.

The last step of the Software Heritage archiver's pipeline (director, worker,
copier; issue 13 §3): :func:`copy_file` streams the object from
``source.get_range`` into ``destination.put``, which is create-only and
checks the declared size and SHA-256 before the final name appears (a local
directory: temporary file, fsync, link; S3: the server's SHA-256 of every
part, a multipart upload past the part size, and a conditional copy to the
name). Optionally (``read_back=True``) the object is then read back from the
destination and hashed once more.

The answer is a :class:`CopyResult` whose ``outcome`` the worker acts on:

==================  =============================================  ====================
outcome             meaning                                        copy status
==================  =============================================  ====================
``copied``          the destination holds the verified bytes now   destination present
``already_present`` it held an object with the same SHA-256        destination present
``replaced``        ``replace=True``: another object was replaced  destination present
``corrupted``       it holds another object under the name; left   destination corrupted
                    as it is (append-only) unless ``replace=True``
``retry``           transient failures (network, 5xx, a server     unchanged; retry at
                    stopped) on every attempt                      ``retry_after_s``
``failed``          a lasting failure at the destination (access   unchanged; operator
                    denied, no bucket, disk full)
``source_missing``  the source has no such object                  source missing
``source_corrupt``  the source's bytes do not have the SHA-256     source corrupted
                    (or a gzip member that does not inflate)
``source_failed``   a lasting failure reading the source           unchanged; operator
==================  =============================================  ====================

Transient failures are retried inside :func:`copy_file`, up to
``RetryPolicy.attempts`` attempts, sleeping between them with exponential
backoff and full jitter (AWS Architecture Blog, *Exponential Backoff And
Jitter*): a random time in ``[0, min(max_delay_s, base_delay_s * 2**n)]``
(:func:`gateway.backoff.backoff_s` of ``n + 1``).
Concurrent copiers of one file are safe: puts are create-only, so one creates
it and the others find it ``already_present``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Final, Literal

from gateway.backoff import backoff_s
from gateway.storage.base import ObjectInfo, Storage, check_sha256
from gateway.storage.errors import (
    CorruptObject,
    DigestMismatch,
    ObjectConflict,
    ObjectNotFound,
    RangeNotSatisfiable,
    StorageError,
)
from gateway.storage.integrity import SourceCheck

__all__ = ["CopyOutcome", "CopyResult", "RetryPolicy", "copy_file"]

logger = logging.getLogger(__name__)

CopyOutcome = Literal[
    "copied",
    "already_present",
    "replaced",
    "corrupted",
    "retry",
    "failed",
    "source_missing",
    "source_corrupt",
    "source_failed",
]
CopyStatus = Literal["present", "corrupted", "missing"]

_DESTINATION_STATUS: Final[dict[CopyOutcome, CopyStatus]] = {
    "copied": "present",
    "already_present": "present",
    "replaced": "present",
    "corrupted": "corrupted",
}
_SOURCE_STATUS: Final[dict[CopyOutcome, CopyStatus]] = {
    "source_missing": "missing",
    "source_corrupt": "corrupted",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Attempts for transient failures, and the backoff between them (seconds)."""

    attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter: uniform in ``[0, min(max_delay_s, base_delay_s * 2**attempt)]``.

        ``attempt`` counts from 0 (the wait after the first failure), so the
        ceiling is :func:`~gateway.backoff.backoff_s` of ``attempt + 1``.

        >>> RetryPolicy(base_delay_s=1.0, max_delay_s=3.0).delay_s(5, random.Random(1)) <= 3.0
        True
        """
        ceiling = backoff_s(attempt + 1, self.base_delay_s, self.max_delay_s)
        return (rng or random).uniform(0.0, ceiling)


@dataclass(frozen=True, slots=True, kw_only=True)
class CopyResult:
    """What :func:`copy_file` did with one file (see the module docstring's table).

    ``detail`` is the reason in words (the last error for ``retry`` and the
    failures); ``existing`` the destination's object for ``corrupted``;
    ``verified_by`` how the destination's bytes were checked; ``attempts``
    how many puts were tried; ``retry_after_s`` a suggested wait for
    ``retry``; ``elapsed_s`` the wall time of the whole copy.
    """

    name: str
    source: str
    destination: str
    outcome: CopyOutcome
    size: int
    sha256: str
    detail: str = ""
    verified_by: str = ""
    existing: ObjectInfo | None = None
    attempts: int = 1
    retry_after_s: float | None = None
    elapsed_s: float = 0.0

    @property
    def destination_status(self) -> CopyStatus | None:
        """The destination copy's new status (present, corrupted), or None: unchanged."""
        return _DESTINATION_STATUS.get(self.outcome)

    @property
    def source_status(self) -> CopyStatus | None:
        """The source copy's new status (missing, corrupted), or None: unchanged."""
        return _SOURCE_STATUS.get(self.outcome)


class _SourceFailed(Exception):
    """A failure reading the source, carried through ``destination.put`` untouched."""

    def __init__(self, error: StorageError) -> None:
        super().__init__(str(error))
        self.error = error


#: Chunks read ahead from the source while the destination writes the current one.
READ_AHEAD_CHUNKS: Final = 4


async def _from_source(
    source: Storage, name: str, check: SourceCheck | None
) -> AsyncGenerator[bytes, None]:
    """The source's bytes, read up to :data:`READ_AHEAD_CHUNKS` ahead by a task of its
    own (reading overlaps the destination's hashing and writing), each fed to
    ``check`` (in a worker thread) before the stream may end; a source failure
    arrives as :class:`_SourceFailed`, so that ``put`` passes it through untouched."""
    queue: asyncio.Queue[bytes | StorageError | None] = asyncio.Queue(READ_AHEAD_CHUNKS)

    async def read() -> None:
        stream = source.get_range(name)  # whole: a longer source is corrupt too
        try:
            async for chunk in stream:
                await queue.put(chunk)
                if check is not None:
                    await asyncio.to_thread(check.feed, chunk)
            if check is not None:
                check.finish()
            await queue.put(None)
        except StorageError as exc:
            await queue.put(exc)
        finally:
            await stream.aclose()

    reader = asyncio.create_task(read())
    try:
        while (item := await queue.get()) is not None:
            if isinstance(item, StorageError):
                raise _SourceFailed(item) from item
            yield item
        await reader  # re-raises anything unexpected from the reader
    finally:
        if not reader.done():
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class _Copy:
    """One call of :func:`copy_file`: what every attempt and its result name."""

    source: Storage
    destination: Storage
    name: str
    size: int
    sha256: str
    started: float

    def result(self, outcome: CopyOutcome, attempts: int, **more: object) -> CopyResult:
        """The copy's result, logged (INFO when the destination holds it, else WARNING)."""
        done = CopyResult(
            name=self.name,
            source=self.source.name,
            destination=self.destination.name,
            outcome=outcome,
            size=self.size,
            sha256=self.sha256,
            attempts=attempts,
            elapsed_s=time.monotonic() - self.started,
            **more,  # type: ignore[arg-type]
        )
        log = logger.info if done.destination_status == "present" else logger.warning
        log(
            "copy %s: %s -> %s: %s%s",
            self.name,
            self.source.name,
            self.destination.name,
            outcome,
            f" ({done.detail})" if done.detail else "",
        )
        return done


async def copy_file(
    source: Storage,
    destination: Storage,
    name: str,
    *,
    size: int,
    sha256: str,
    replace: bool = False,
    read_back: bool = False,
    retry: RetryPolicy = RetryPolicy(),
    check: Callable[[], SourceCheck | None] | None = None,
) -> CopyResult:
    """Copy object ``name`` (``size`` bytes, SHA-256 ``sha256``) from ``source`` to
    ``destination``; never raises a :class:`StorageError` (it is the result's outcome).

    ``replace``: write over another object found under the name at the
    destination (a copy known to be damaged, ``store repair``); otherwise it
    is reported ``corrupted``. ``read_back``: after the put, read the
    destination's object back whole and compare SHA-256s. ``check``: makes,
    for each attempt, a :class:`~gateway.storage.integrity.SourceCheck` fed
    every byte read from the source (every gzip member inflates:
    :func:`~gateway.storage.integrity.check_for`); a failure is
    ``source_corrupt`` and nothing is published. Cancellation propagates.
    """
    check_sha256(sha256)
    copy = _Copy(source, destination, name, size, sha256, started=time.monotonic())
    last: StorageError | None = None
    for attempt in range(1, retry.attempts + 1):
        done = await _attempt(
            copy,
            attempt,
            check() if check is not None else None,
            replace=replace,
            read_back=read_back,
        )
        if isinstance(done, CopyResult):
            return done
        last = done
        if attempt < retry.attempts:
            delay = retry.delay_s(attempt - 1)
            logger.info(
                "copy %s -> %s: attempt %d failed (%s); again in %.2f s",
                name,
                destination.name,
                attempt,
                last,
                delay,
            )
            await asyncio.sleep(delay)
    return copy.result(
        "retry",
        retry.attempts,
        detail=str(last),
        retry_after_s=retry.delay_s(retry.attempts),
    )


async def _attempt(
    copy: _Copy, attempt: int, check: SourceCheck | None, *, replace: bool, read_back: bool
) -> CopyResult | StorageError:
    """One attempt of ``copy``: its result, or the transient error to try again after."""
    stream = _from_source(copy.source, copy.name, check)
    try:
        put = await copy.destination.put(
            copy.name, stream, size=copy.size, sha256=copy.sha256, replace=replace
        )
        if read_back:
            found = await copy.destination.digest(copy.name)
            if found != copy.sha256:
                return copy.result(
                    "corrupted",
                    attempt,
                    detail=f"read back as sha256 {found} after the put",
                    existing=put.info,
                )
        outcome: CopyOutcome = "copied" if put.outcome == "created" else put.outcome
        verified = put.verified_by + ("; read back" if read_back else "")
        return copy.result(outcome, attempt, verified_by=verified)
    except _SourceFailed as exc:
        return _source_failure(copy, attempt, exc.error)
    except DigestMismatch as exc:
        return copy.result("source_corrupt", attempt, detail=exc.problem)
    except ObjectConflict as exc:
        return copy.result("corrupted", attempt, detail=exc.problem, existing=exc.existing)
    except StorageError as exc:
        if isinstance(exc, ObjectNotFound) or not exc.retryable:
            return copy.result("failed", attempt, detail=str(exc))
        return exc
    finally:
        await stream.aclose()


def _source_failure(copy: _Copy, attempt: int, error: StorageError) -> CopyResult | StorageError:
    """The result of an attempt that failed reading the source, or the error when transient."""
    if isinstance(error, ObjectNotFound):
        return copy.result("source_missing", attempt, detail=str(error))
    if isinstance(error, RangeNotSatisfiable):
        return copy.result("source_corrupt", attempt, detail=f"shorter than {copy.size} bytes")
    if isinstance(error, CorruptObject):
        return copy.result("source_corrupt", attempt, detail=error.problem)
    if not error.retryable:
        return copy.result("source_failed", attempt, detail=str(error))
    return error
