"""A broker's copy of the metadata log (KRaft's MetadataLoader and MetadataDelta on a broker).

Rules:
1. The image moves only by replaying committed batches in order, through the same pure
   `apply_batch` as the controllers: a batch decided at another version than the image's
   is a gap (StaleBatchError), and the whole answer is dropped; a batch already applied
   is skipped, so overlapping answers are harmless.
2. A snapshot replaces the image when it is newer; the next local changes then compare
   every partition (there are no records to say what changed).
3. What the batches touched accumulates until the broker has acted on it (`acted`), so a
   failed attempt to act is retried with everything it missed.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftlite.metadata.image import MetadataImage, StaleBatchError, apply_batch
from kraftlite.metadata.local_changes import LocalChanges, Touched, local_changes
from kraftlite.metadata.records import batch_from_json
from kraftlite.metadata.views import image_from_json


@dataclass
class MetadataFollower:
    image: MetadataImage = MetadataImage.EMPTY
    touched: Touched = field(default_factory=Touched)
    everything: bool = True  # a snapshot (or nothing yet) since the broker last acted
    batches_applied: int = 0
    snapshots_applied: int = 0

    def apply(
        self, batches: Iterable[Mapping[str, Any]], snapshot: Mapping[str, Any] | None
    ) -> bool:
        """Apply a controller's answer; True if the image moved."""
        before = self.image.version
        if snapshot is not None:
            image = image_from_json(dict(snapshot))
            if image.version > self.image.version:
                self.image, self.everything = image, True
                self.touched = Touched()
                self.snapshots_applied += 1
        image, touched, applied = self.image, Touched(), 0
        for item in batches:
            batch = batch_from_json(item)
            if batch.expected_version < image.version:
                continue  # applied already (an answer overlapping an earlier one)
            if batch.expected_version > image.version:
                raise StaleBatchError(
                    f"gap: batch decided at {batch.expected_version}, image at {image.version}"
                )
            image = apply_batch(image, batch)
            touched.add(batch.records)
            applied += 1
        self.image = image
        self.touched.merge(touched)
        self.batches_applied += applied
        return self.image.version > before

    def changes_since(self, acted: MetadataImage, broker_id: int) -> LocalChanges:
        """What this broker must do to go from `acted` (the image it last acted on) to ours."""
        touched = None if self.everything or acted.version == 0 else self.touched
        return local_changes(acted, self.image, broker_id, touched)

    def config_topics(self) -> set[str] | None:
        """Topics whose configs changed since the broker last acted; None: any may have."""
        return None if self.everything else set(self.touched.config_topics)

    def acted(self) -> None:
        """The broker acted on everything up to our image."""
        self.touched = Touched()
        self.everything = False
