"""Images attached to a message: checked by their bytes, stored with the team, served only to who
may read the conversation, sent with the message to a model that reads images, refused with a
sentence for one that does not."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone
from PIL import Image

from agents.chat.services import conversation_create, conversation_share
from agents.models import Attachment, Message, Provider
from agents.runtime.messages import ImageBlock
from agents.turns.attachments import MAX_IMAGE_BYTES, attachments_unsent_forget, sniff_image
from agents.turns.builder import turn_history
from agents.turns.services import turn_send
from agents.turns.tasks import turn_run
from tests.members import acting_of, member_of
from traces.models import Trace


def png(width: int = 8, height: int = 8) -> bytes:
    """A real PNG of that size (Pillow's own encoder)."""
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 80, 40)).save(out, format="PNG")
    return out.getvalue()


PNG = png()


def upload(client, conversation, data=PNG, name="cat.png", content_type="image/png"):
    return client.post(reverse("attachment_upload", args=[conversation.uuid]),
                       {"file": SimpleUploadedFile(name, data, content_type=content_type)})


@pytest.mark.parametrize(("head", "media_type"), [
    (PNG, "image/png"), (b"\xff\xd8\xff\xe0" + b"\0" * 8, "image/jpeg"), (b"GIF89a" + b"\0" * 8, "image/gif"),
    (b"RIFF\0\0\0\0WEBPVP8 ", "image/webp"), (b"<svg onload=alert(1)>", None), (b"%PDF-1.7", None),
])
def test_the_type_is_told_by_the_bytes(head, media_type):
    assert sniff_image(head[:16]) == media_type


def test_an_image_is_uploaded_for_the_next_message_and_served_to_who_may_read(
        client_for, alice, bob, vera, charlie, conversation):
    response = upload(client_for(alice), conversation)
    assert response.status_code == 201
    data = response.json()
    row = Attachment.objects.get(uuid=data["id"])
    assert (row.team_id, row.media_type, row.size, row.message) == (conversation.team_id, "image/png", len(PNG), None)
    got = client_for(alice).get(data["url"])
    assert got.status_code == 200 and got.content == PNG and got["Content-Type"] == "image/png"
    assert got["X-Content-Type-Options"] == "nosniff" and "sandbox" in got["Content-Security-Policy"]
    for other in (bob, vera, charlie):  # a private conversation: not even its team sees it
        assert client_for(other).get(data["url"]).status_code == 404
    conversation_share(conversation=conversation, membership=member_of(alice, conversation), shared=True)
    assert client_for(vera).get(data["url"]).status_code == 200
    assert client_for(charlie).get(data["url"]).status_code == 404


def test_bad_uploads_are_refused_with_a_reason(client_for, alice, vera, conversation):
    c = client_for(alice)
    fake = upload(c, conversation, data=b"<script>alert(1)</script>", name="x.png")
    assert fake.status_code == 400 and fake.json()["error"] == "Attach a PNG, JPEG, GIF or WebP image."
    big = upload(c, conversation, data=PNG + b"\0" * MAX_IMAGE_BYTES)
    assert big.status_code == 400 and "the limit is 5 MB" in big.json()["error"]
    assert c.post(reverse("attachment_upload", args=[conversation.uuid])).status_code == 400
    conversation_share(conversation=conversation, membership=member_of(alice, conversation), shared=True)
    assert upload(client_for(vera), conversation).status_code == 403
    assert not Attachment.objects.exists()


def test_another_conversations_image_is_not_found_through_this_one(client_for, alice, agent, conversation):
    other = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    image_id = upload(client_for(alice), other).json()["id"]
    url = reverse("attachment", args=[conversation.uuid, image_id])
    assert client_for(alice).get(url).status_code == 404


@pytest.mark.django_db(transaction=True)
def test_a_message_carries_its_images_once_and_the_demo_model_receives_them(
        client_for, alice, bob, agent, conversation, sent_turns):
    ids = [upload(client_for(alice), conversation).json()["id"] for _ in range(2)]
    sent = turn_send(acting=acting_of(alice, conversation), text="", attachments=ids)
    message = sent.trace.user_message
    assert message.text == "(2 images attached)"
    assert [b["type"] for b in message.blocks] == ["text", "image", "image"]
    assert [b["attachment"] for b in message.blocks[1:]] == ids
    assert all("data" not in b for b in message.blocks)
    assert Attachment.objects.filter(message=message).count() == 2
    with pytest.raises(ValidationError, match="was sent already"):
        turn_send(acting=acting_of(alice, conversation), text="again", attachments=ids[:1])
    assert turn_run(sent.trace.pk) == "completed"
    assert Trace.objects.get(pk=sent.trace.pk).answer.startswith("I received 2 images (image/png).")
    # the next turn's history has them, with their bytes
    later = turn_send(acting=acting_of(alice, conversation), text="and now?").trace
    history = turn_history(trace=later, agent=agent)
    images = [b for m in history for b in m.blocks if isinstance(b, ImageBlock)]
    assert len(images) == 2 and all(b.data for b in images)


def test_someone_elses_or_too_many_images_are_refused(client_for, alice, agent, sent_turns, make_member, team_a):
    admin = make_member(team_a, "adam", "admin")
    mine = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    ids = [upload(client_for(alice), mine).json()["id"] for _ in range(5)]
    with pytest.raises(ValidationError, match="at most 4 images"):
        turn_send(acting=acting_of(alice, mine), text="look", attachments=ids)
    with pytest.raises(ValidationError, match="not this conversation's"):
        turn_send(acting=acting_of(admin, mine), text="look", attachments=ids[:1])
    with pytest.raises(ValidationError, match="not this conversation's"):
        turn_send(acting=acting_of(alice, mine), text="look", attachments=["not-a-uuid"])
    assert not Message.objects.filter(conversation=mine).exists()


def test_a_model_that_cannot_read_images_refuses_them_before_anything_is_sent(
        client_for, alice, agent, team_a, sent_turns):
    text_only = Provider.objects.create(team=team_a, name="Old GPT", kind="openai")
    agent.provider, agent.model = text_only, "gpt-3.5-turbo"
    agent.save()
    conversation = conversation_create(agent=agent, membership=member_of(alice, agent.team))
    image_id = upload(client_for(alice), conversation).json()["id"]
    response = client_for(alice).post(reverse("message_send", args=[conversation.uuid]),
                                      {"text": "What is this?", "attachments": image_id}, HTTP_HX_REQUEST="true")
    assert response.status_code == 422
    assert "gpt-3.5-turbo cannot read images. Remove the image, or switch this conversation" in response.content.decode()
    assert not Trace.objects.filter(conversation=conversation).exists() and sent_turns == []


@pytest.mark.django_db(transaction=True)
def test_the_chat_and_the_inspector_show_the_images(client_for, alice, conversation, sent_turns):
    image_id = upload(client_for(alice), conversation).json()["id"]
    trace = turn_send(acting=acting_of(alice, conversation), text="Look", attachments=[image_id]).trace
    url = reverse("attachment", args=[conversation.uuid, image_id])
    html = client_for(alice).get(reverse("conversation", args=[conversation.uuid])).content.decode()
    assert f'<img src="{url}" alt="An attached image (image/png)"' in html
    assert 'id="attach-input"' in html
    turn_run(trace.pk)
    step = trace.steps.get(kind="llm_request", seq=1)
    detail = client_for(alice).get(reverse("step_detail", args=[trace.uuid, step.seq])).content.decode()
    assert f'<img src="{url}"' in detail
    request = step.payloads.get(kind="request").content
    assert "base64" not in request and image_id in request  # the trace names the image, never its bytes


def test_images_never_sent_are_dropped_after_a_day(client_for, alice, conversation, sent_turns):
    kept, sent, stale = (upload(client_for(alice), conversation).json()["id"] for _ in range(3))
    turn_send(acting=acting_of(alice, conversation), text="with one", attachments=[sent])
    Attachment.objects.filter(uuid__in=[sent, stale]).update(created_at=timezone.now() - timedelta(days=2))
    assert attachments_unsent_forget() == 1
    assert set(str(u) for u in Attachment.objects.values_list("uuid", flat=True)) == {kept, sent}


# -- limits (issue 30, F6) ----------------------------------------------------------------------
def test_an_image_too_large_in_pixels_is_refused_from_its_header(client_for, alice, conversation):
    # 20,000 x 20,000 pixels, a little over a megabyte as a PNG: refused without decoding it.
    out = io.BytesIO()
    Image.new("1", (20_000, 20_000)).save(out, format="PNG")
    assert len(out.getvalue()) < 5 * 1024 * 1024
    refused = upload(client_for(alice), conversation, data=out.getvalue())
    assert refused.status_code == 400
    assert "pixels" in refused.json()["error"] and not Attachment.objects.exists()


def test_a_file_that_only_starts_like_an_image_is_refused(client_for, alice, conversation):
    refused = upload(client_for(alice), conversation, data=b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    assert refused.status_code == 400 and "could not be read" in refused.json()["error"]


def test_uploads_per_minute_and_per_conversation_are_limited(client_for, alice, conversation, settings):
    settings.UPLOADS_PER_MINUTE = 3
    c = client_for(alice)
    assert [upload(c, conversation).status_code for _ in range(3)] == [201, 201, 201]
    fourth = upload(c, conversation)
    assert fourth.status_code == 400 and "in the last minute" in fourth.json()["error"]
    Attachment.objects.update(created_at=timezone.now() - timedelta(minutes=2))
    settings.UPLOAD_CONVERSATION_MAX_MB = 0
    full = upload(c, conversation)
    assert full.status_code == 400 and "start a new conversation" in full.json()["error"]
    assert Attachment.objects.count() == 3
