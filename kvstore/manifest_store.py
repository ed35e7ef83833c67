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
        for _attempt in range(100):
            current = self.latest_id()
            if current == 0:
                return None
            try:
                return self.load(current)
            except FileNotFoundError:
                continue  # GC deleted it: a newer one exists, look again
        raise FileNotFoundError(f"{self.store.describe()}: the latest manifest kept vanishing")

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
        """Whether manifest ``manifest_id + 1`` exists (one probe).

        For a writer whose latest manifest is ``manifest_id``, the next id is
        the claim of the writer that fenced it, which GC keeps. For anyone
        else GC may have deleted it while newer ones exist: compare with
        :meth:`latest_id` to be sure."""
        return self.store.exists(paths.manifest_name(manifest_id + 1))
