"""Building metadata images in tests by replaying records."""

from __future__ import annotations

from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage, apply_batch


def play(image: MetadataImage, *records: r.MetadataRecord) -> MetadataImage:
    """Apply `records` as one batch decided against `image`."""
    return apply_batch(image, r.RecordBatch(image.version, records))


def live_brokers(*broker_ids: int) -> MetadataImage:
    """An image with these brokers registered and unfenced."""
    image = MetadataImage.EMPTY
    for b in broker_ids:
        image = play(
            image,
            r.RegisterBrokerRecord(
                broker_id=b, incarnation_id=f"i{b}", broker_epoch=image.version + 1, url=f"u{b}"
            ),
        )
        image = play(
            image, r.UnfenceBrokerRecord(broker_id=b, broker_epoch=image.brokers[b].broker_epoch)
        )
    return image
