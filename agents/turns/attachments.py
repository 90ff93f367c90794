"""Images people attach to a message: checked (type by their bytes, size, count), stored with the
team, sent to models that can read them, refused with a sentence before any request for a model
that cannot. The stored message names each image (``{"type": "image", "attachment": …}``); the
bytes reach the runtime only when a turn's request is built."""

from __future__ import annotations

import base64
import io
import warnings
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q, Sum
from django.utils import timezone
from PIL import Image

from agents.access import conversation_act_check
from agents.models import Attachment, Conversation
from agents.runtime.messages import ImageBlock
from agents.runtime.messages import Message as RuntimeMessage
from agentsite.models import Membership

MAX_IMAGE_BYTES = 5 * 1024 * 1024
# An image uploaded and never sent is dropped after this long (the workers' periodic clean-up).
UNSENT_KEPT_FOR = timedelta(hours=24)
MAX_IMAGES_PER_MESSAGE = 4
# The formats every vision model takes, told by their first bytes (never by the name or the
# type the browser claims).
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def sniff_image(head: bytes) -> str | None:
    for signature, media_type in SIGNATURES:
        if head.startswith(signature):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def _pixels_problem(data: bytes, media_type: str) -> str | None:
    """Why the image cannot be taken for its size in pixels (its header read, not decoded;
    Pillow refuses a decompression bomb itself), or None."""
    limit = settings.UPLOAD_MAX_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        return f"The image is too large in pixels; the limit is {limit / 1e6:.0f} megapixels."
    except (OSError, ValueError, SyntaxError):
        return "The image could not be read: attach a PNG, JPEG, GIF or WebP image."
    if width * height > limit:
        return (f"The image is {width:,} × {height:,} pixels; the limit is {limit / 1e6:.0f} "
                "megapixels.")
    return None


def _upload_limits_check(conversation: Conversation, user_id: int, size: int) -> None:
    """Per person, uploads per minute; per conversation and per team, megabytes of images kept."""
    now = timezone.now()
    per_minute = settings.UPLOADS_PER_MINUTE
    recent = Attachment.objects.filter(uploaded_by_id=user_id, created_at__gte=now - timedelta(minutes=1))
    if recent.count() >= per_minute:
        raise ValidationError(f"You attached {per_minute} images in the last minute; wait a moment "
                              "before attaching more.")
    totals = Attachment.objects.filter(team_id=conversation.team_id).aggregate(
        team=Sum("size"), conversation=Sum("size", filter=Q(conversation=conversation)))
    for scope, limit_mb in (("conversation", settings.UPLOAD_CONVERSATION_MAX_MB),
                            ("team", settings.UPLOAD_TEAM_MAX_MB)):
        if (totals[scope] or 0) + size > limit_mb * 1024 * 1024:
            raise ValidationError(f"This {scope} holds {limit_mb:,} MB of images already, its limit"
                                  + (": start a new conversation to attach more." if scope == "conversation"
                                     else ": ask an admin to delete old conversations."))


def attachment_create(*, conversation: Conversation, membership: Membership, upload: Any) -> Attachment:
    """Store an uploaded image for the next message of ``conversation`` (who may write in it),
    within the upload limits: its size in bytes and pixels, uploads per minute per person,
    megabytes per conversation and per team."""
    conversation_act_check(membership, conversation, "attach images in it")
    size = int(getattr(upload, "size", 0) or 0)
    if size > MAX_IMAGE_BYTES:
        raise ValidationError(f"The image is {size / 1024 / 1024:.1f} MB; the limit is "
                              f"{MAX_IMAGE_BYTES // 1024 // 1024} MB.")
    data = upload.read(MAX_IMAGE_BYTES + 1)
    if len(data) > MAX_IMAGE_BYTES:
        raise ValidationError(f"The image is larger than {MAX_IMAGE_BYTES // 1024 // 1024} MB.")
    media_type = sniff_image(data[:16])
    if media_type is None:
        raise ValidationError("Attach a PNG, JPEG, GIF or WebP image.")
    problem = _pixels_problem(data, media_type)
    if problem:
        raise ValidationError(problem)
    _upload_limits_check(conversation, membership.user_id, len(data))
    name = str(getattr(upload, "name", "") or "")[:200]
    return Attachment.objects.create(team_id=conversation.team_id, conversation=conversation,
                                     uploaded_by_id=membership.user_id, media_type=media_type, size=len(data),
                                     name=name, data=data)


def attachments_for_message(*, conversation: Conversation, membership: Membership,
                            ids: Sequence[str]) -> list[Attachment]:
    """The images ``membership``'s person uploaded to ``conversation`` and not sent yet, by public id."""
    ids = [i for i in dict.fromkeys(str(i).strip() for i in ids) if i]
    if not ids:
        return []
    if len(ids) > MAX_IMAGES_PER_MESSAGE:
        raise ValidationError(f"Attach at most {MAX_IMAGES_PER_MESSAGE} images to a message.")
    try:
        rows = list(Attachment.objects.filter(conversation=conversation, uploaded_by_id=membership.user_id,
                                              message__isnull=True,
                                              uuid__in=ids).defer("data"))
    except ValidationError as exc:  # not UUIDs
        raise ValidationError("One of the attached images is not this conversation's.") from exc
    if len(rows) != len(ids):
        raise ValidationError("One of the attached images is not this conversation's, or was sent "
                              "already: attach it again.")
    order = {value: index for index, value in enumerate(ids)}
    return sorted(rows, key=lambda a: order[str(a.uuid)])


def attachments_unsent_forget(*, now: datetime | None = None) -> int:
    """Drop images uploaded for a message that was never sent; how many went."""
    now = now or timezone.now()
    deleted, _ = Attachment.objects.filter(message__isnull=True, created_at__lt=now - UNSENT_KEPT_FOR).delete()
    return deleted


def image_block(attachment: Attachment, *, with_data: bool = False) -> ImageBlock:
    data = base64.b64encode(bytes(attachment.data)).decode() if with_data else ""
    return ImageBlock(attachment.media_type, data, str(attachment.uuid))


def with_image_data(messages: Iterable[RuntimeMessage]) -> list[RuntimeMessage]:
    """``messages`` with the bytes of their images loaded (one query); an image whose file is
    gone is left out."""
    messages = list(messages)
    wanted = {b.attachment for m in messages for b in m.blocks if isinstance(b, ImageBlock) and not b.data}
    if not wanted:
        return messages
    found = {str(a.uuid): a for a in Attachment.objects.filter(uuid__in=wanted)}
    for message in messages:
        blocks = []
        for block in message.blocks:
            if isinstance(block, ImageBlock) and not block.data:
                row = found.get(block.attachment)
                if row is None:
                    continue
                block = image_block(row, with_data=True)
            blocks.append(block)
        message.blocks = blocks
    return messages
