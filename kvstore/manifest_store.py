"""Reading and advancing the manifest on the object store.

The latest manifest is found by listing ``manifest/`` for a starting id and
then probing forward (``id+1``, ``id+2``, ... until one is missing), so a
stale listing can only make the search slower, never wrong. A new manifest is
written with ``put_if_absent`` at ``id+1``: of two writers racing for the same
id exactly one wins; the loser reloads, and if the winner carries a higher
writer epoch the loser has been fenced.
"""

from __future__ import annotations

from kvstore import paths
from kvstore.format.manifest import Manifest
from kvstore.objstore.base import ObjectStore


class ManifestStore:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def latest_id(self) -> int:
        ids = [
            i
            for i in map(paths.parse_manifest_name, self.store.list(paths.MANIFEST_DIR))
            if i is not None
        ]
        current = max(ids, default=0)
        while self.store.exists(paths.manifest_name(current + 1)):
            current += 1
        return current

    def load(self, manifest_id: int) -> Manifest:
        name = paths.manifest_name(manifest_id)
        return Manifest.decode(self.store.get(name), where=name)

    def load_latest(self) -> Manifest | None:
        current = self.latest_id()
        return None if current == 0 else self.load(current)

    def write(self, manifest: Manifest, data: bytes | None = None) -> None:
        """Create manifest ``manifest.id``; FileExistsError if that id is taken."""
        manifest.check()
        payload = manifest.encode() if data is None else data
        self.store.put_if_absent(paths.manifest_name(manifest.id), payload)

    def holds(self, manifest_id: int, data: bytes) -> bool:
        """Whether manifest ``manifest_id`` exists with exactly these bytes."""
        try:
            return self.store.get(paths.manifest_name(manifest_id)) == data
        except FileNotFoundError:
            return False

    def newer_exists(self, manifest_id: int) -> bool:
        return self.store.exists(paths.manifest_name(manifest_id + 1))
