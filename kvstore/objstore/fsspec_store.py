"""Any fsspec filesystem as an object store (S3 through s3fs, GCS, ...).

``put_if_absent`` is ``pipe_file(path, data, mode="create")``, which s3fs sends
as ``If-None-Match: *`` and maps a 412 to FileExistsError. Filesystems whose
``pipe_file`` has no create mode cannot be used for a writer (fencing would be
a check-then-write race), so they raise :class:`NotImplementedError` there.
Filesystems are built with ``skip_instance_cache=True`` and
``use_listings_cache=False`` so listings never go stale.
"""

from __future__ import annotations

from typing import Any

from kvstore.objstore.base import Journal, RangeReader, SimpleRangeReader, check_name


class FsspecStore:
    def __init__(
        self,
        protocol: str,
        root: str,
        storage_options: dict[str, Any] | None = None,
        *,
        filesystem: Any = None,
    ) -> None:
        import fsspec

        opts = dict(storage_options or {})
        if filesystem is None:
            opts.setdefault("skip_instance_cache", True)
            opts.setdefault("use_listings_cache", False)
            filesystem = fsspec.filesystem(protocol, **opts)
        self.fs = filesystem
        self.protocol = protocol
        self.root = root.rstrip("/")

    def _path(self, name: str) -> str:
        return f"{self.root}/{check_name(name)}"

    def put(self, name: str, data: bytes) -> None:
        self.fs.pipe_file(self._path(name), bytes(data))

    def put_if_absent(self, name: str, data: bytes) -> None:
        try:
            self.fs.pipe_file(self._path(name), bytes(data), mode="create")
        except TypeError as exc:  # pipe_file without a create mode
            raise NotImplementedError(
                f"{self.protocol}: filesystem has no atomic create (pipe_file mode='create')"
            ) from exc

    def get(self, name: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(name)))
        except FileNotFoundError:
            raise FileNotFoundError(name) from None

    def get_range(self, name: str, start: int, length: int) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._path(name), start=start, end=start + length))
        except FileNotFoundError:
            raise FileNotFoundError(name) from None

    def list(self, prefix: str = "") -> list[str]:
        dir_part, _, _ = prefix.rpartition("/")
        base = f"{self.root}/{dir_part}" if dir_part else self.root
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return []
        strip = len(self.root) + 1
        names = []
        for path in found:
            rel = (
                path[strip:]
                if path.startswith(self.root + "/")
                else path.split(self.root + "/", 1)[-1]
            )
            if rel.startswith(prefix):
                names.append(rel)
        return sorted(names)

    def delete(self, name: str) -> None:
        try:
            self.fs.rm_file(self._path(name))
        except FileNotFoundError:
            pass

    def exists(self, name: str) -> bool:
        return bool(self.fs.exists(self._path(name)))

    def size(self, name: str) -> int:
        try:
            return int(self.fs.size(self._path(name)))
        except FileNotFoundError:
            raise FileNotFoundError(name) from None

    def open_journal(self, name: str) -> Journal | None:
        return None

    def open_range_reader(self, name: str) -> RangeReader:
        return SimpleRangeReader(self, name)

    def describe(self) -> str:
        return f"{self.protocol}://{self.root}"
