"""Images in a turn: sent as the providers' own image parts (checked against the official SDKs'
types), kept out of the trace as bytes, refused before any request for a model without vision,
and left out of a non-vision model's older history with a sentence saying so."""

from __future__ import annotations

import base64

from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam
from pydantic import TypeAdapter

from agents.runtime.loop import TurnConfig, TurnStatus, run_turn
from agents.runtime.messages import (
    IMAGE_OMITTED,
    ImageBlock,
    Message,
    Role,
    TextBlock,
    block_from_dict,
)
from agents.runtime.providers.anthropic import messages_to_anthropic
from agents.runtime.providers.demo import DemoProvider
from agents.runtime.providers.openai import messages_to_openai

from .scripted_provider import FakeScriptedProvider, answer

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()


def image(attachment: str = "a1") -> ImageBlock:
    return ImageBlock("image/png", PNG, attachment)


def asked() -> Message:
    return Message(Role.USER, [TextBlock("What is in this picture?"), image()])


def test_openai_gets_text_and_image_url_parts_its_sdk_accepts():
    wire = messages_to_openai([], [asked()])
    assert wire == [{"role": "user", "content": [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}]
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(wire)


def test_anthropic_gets_a_base64_image_block_its_sdk_accepts():
    wire = messages_to_anthropic([asked()])
    assert wire[0]["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": PNG}}
    TypeAdapter(list[MessageParam]).validate_python(wire)


def test_the_stored_form_keeps_the_attachment_not_the_bytes():
    stored = image().to_dict()
    assert stored == {"type": "image", "media_type": "image/png", "attachment": "a1"}
    back = block_from_dict(stored)
    assert isinstance(back, ImageBlock) and back.attachment == "a1" and back.data == ""


async def test_a_model_without_vision_refuses_an_image_before_any_request():
    provider = FakeScriptedProvider([answer("never")])
    result = await run_turn(provider=provider, config=TurnConfig(model="text-only"), history=[],
                            user_message="What is this?", user_images=[image()], tools=[])
    assert (result.status, result.error_kind) == (TurnStatus.FAILED, "capability")
    assert result.error == ("The model text-only cannot read images (1 attached). Remove the image, or "
                            "switch to a model that supports vision.")
    assert provider.requests == []


async def test_older_images_are_left_out_for_a_model_without_vision():
    provider = FakeScriptedProvider([answer("fine")])
    history = [asked(), Message.assistant("A cat.")]
    result = await run_turn(provider=provider, config=TurnConfig(model="text-only"), history=history,
                            user_message="Thanks", tools=[])
    assert result.status is TurnStatus.COMPLETED
    sent = provider.requests[0].messages[0]
    assert not any(isinstance(b, ImageBlock) for b in sent.blocks)
    assert sent.blocks[1].text == IMAGE_OMITTED


async def test_a_vision_model_gets_the_image_and_the_demo_model_says_what_it_received():
    result = await run_turn(provider=DemoProvider(), config=TurnConfig(model="demo"), history=[],
                            user_message="Look", user_images=[image(), image("a2")], tools=[])
    assert result.status is TurnStatus.COMPLETED
    assert result.text.startswith("I received 2 images (image/png).")
    stored = result.new_messages[0].to_dict()
    assert [b["type"] for b in stored["blocks"]] == ["text", "image", "image"]
    assert all("data" not in b for b in stored["blocks"])
