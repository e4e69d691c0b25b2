"""The family handlers render their model family's prompt layout, and each option changes what it should.

``handler.render`` is the text the handler hands mtmd, before tokenizing: a fake Llama with metadata and
BOS/EOS text is all it needs.  Media show as the handler's marker, written ``<IMG>`` here (``<AUDIO>`` for
audio) for readability; mtmd writes the projector's begin/end tokens around each chunk itself.
"""

from __future__ import annotations

import base64
import warnings
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest

from llama_cpp_multimodal import FAMILIES, GenericMTMDChatHandler, MTMDChatHandler
from llama_cpp_multimodal.families import (GLM41VChatHandler, GLM46VChatHandler, Gemma3ChatHandler,
                                           Gemma4ChatHandler, GraniteDoclingChatHandler, LFM25VLChatHandler,
                                           LFM2VLChatHandler, Llama3VisionAlphaChatHandler, Llava15ChatHandler,
                                           Llava16ChatHandler, MiniCPMv26ChatHandler, MiniCPMv45ChatHandler,
                                           MiniCPMV46ChatHandler, MoondreamChatHandler, NanoLlavaChatHandler,
                                           ObsidianChatHandler, PaddleOCRChatHandler, Qwen25VLChatHandler,
                                           Qwen35ChatHandler, Qwen3ASRChatHandler, Qwen3VLChatHandler,
                                           Step3VLChatHandler)


class FakeLlama:
    """What rendering reads of a Llama: the GGUF metadata and the text of BOS (id 1) and EOS (id 2)."""

    def __init__(self, metadata: dict[str, str] | None = None) -> None:
        self.metadata = dict(metadata or {})

    def token_bos(self) -> int:
        return 1

    def token_eos(self) -> int:
        return 2

    def detokenize(self, tokens: list[int], special: bool = False) -> bytes:
        assert special, "BOS/EOS text is read with special=True"
        return {1: b"<s>", 2: b"</s>"}[tokens[0]]


@pytest.fixture(scope="module")
def mmproj(tiny_mtmd_model: Callable[[str], tuple[Path, Path]]) -> str:
    """A vision projector (Gemma 3's)."""
    return str(tiny_mtmd_model("gemma3")[1])


@pytest.fixture(scope="module")
def audio_mmproj(tiny_mtmd_model: Callable[[str], tuple[Path, Path]]) -> str:
    """An audio projector (Qwen2-Audio's)."""
    return str(tiny_mtmd_model("qwen2a")[1])


@pytest.fixture(scope="module")
def image(tiny_png: Callable[..., Path]) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": str(tiny_png(64, 64))}}


def picture(tiny_png: Callable[..., Path], seed: int) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": str(tiny_png(32, 32, seed=seed))}}


def render(handler: MTMDChatHandler, messages: list[dict[str, Any]], llama: FakeLlama | None = None,
           shown: str = "<IMG>", **variables: Any) -> str:
    """The prompt with each marker written ``shown``; every media part is exactly one marker."""
    prompt, media = handler.render(llama or FakeLlama(), messages, **variables)
    assert prompt.count(handler.marker) == len(media)
    return prompt.replace(handler.marker, shown)


def conversation(image: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}]


_CHATML = ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
           "<|im_start|>assistant\n{generation}")

#: class -> the prompt of ``conversation`` with its default options
LAYOUTS: dict[type[MTMDChatHandler], str] = {
    MTMDChatHandler: "Be brief.\n\nUSER: <IMG>What is this?\nASSISTANT:",
    Llava15ChatHandler: "Be brief.\n\nUSER: <IMG>\nWhat is this?\nASSISTANT:",
    Llava16ChatHandler: "Be brief.\n\nUSER: <IMG>\nWhat is this?\nASSISTANT:",
    ObsidianChatHandler: ("<|im_start|>system\nBe brief.\n###\n<|im_start|>user\n<IMG>\nWhat is this?\n###\n"
                          "<|im_start|>assistant\n"),
    MoondreamChatHandler: "Be brief.\n\n<IMG>\n\nQuestion: What is this?\n\nAnswer:",
    NanoLlavaChatHandler: _CHATML.format(user="<IMG>\nWhat is this?", generation=""),
    Llama3VisionAlphaChatHandler: (
        "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\n<IMG>\nWhat is this?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"),
    MiniCPMv26ChatHandler: _CHATML.format(user="<IMG>\nWhat is this?", generation=""),
    MiniCPMv45ChatHandler: _CHATML.format(user="<IMG>\nWhat is this?", generation="<think>\n"),
    MiniCPMV46ChatHandler: _CHATML.format(user="<IMG>\nWhat is this?", generation="<think>\n"),
    Gemma3ChatHandler: ("<s><start_of_turn>user\nBe brief.\n\n<IMG>What is this?<end_of_turn>\n"
                        "<start_of_turn>model\n"),
    Gemma4ChatHandler: ("<s><|turn>system\n<|think|>\nBe brief.<turn|>\n<|turn>user\n<IMG>What is this?<turn|>\n"
                        "<|turn>model\n"),
    GLM41VChatHandler: "[gMASK]<sop><|system|>\nBe brief.<|user|>\n<IMG>What is this?<|assistant|>\n",
    GLM46VChatHandler: "[gMASK]<sop><|system|>\nBe brief.<|user|>\n<IMG>What is this?<|assistant|>\n",
    GraniteDoclingChatHandler: (
        "<|start_of_role|>system<|end_of_role|>Be brief.<|end_of_text|>\n"
        "<|start_of_role|>user<|end_of_role|><IMG>What is this?<|end_of_text|>\n"
        "<|start_of_role|>assistant<|end_of_role|>"),
    LFM2VLChatHandler: "<|startoftext|>" + _CHATML.format(user="<IMG>What is this?", generation=""),
    LFM25VLChatHandler: "<|startoftext|>" + _CHATML.format(user="<IMG>What is this?", generation=""),
    PaddleOCRChatHandler: "<|begin_of_sentence|>Be brief.\nUser: <IMG>What is this?\nAssistant: ",
    Qwen25VLChatHandler: _CHATML.format(user="<IMG>What is this?", generation=""),
    Qwen3VLChatHandler: _CHATML.format(user="Picture 1: <IMG>What is this?", generation=""),
    Qwen35ChatHandler: _CHATML.format(user="Picture 1: <IMG>What is this?", generation="<think>\n"),
    Step3VLChatHandler: _CHATML.format(user="<IMG>What is this?", generation="<think>"),
}

IMAGE_FAMILIES = [cls for cls in LAYOUTS if cls is not MTMDChatHandler]
ALL_CLASSES = [*LAYOUTS, Qwen3ASRChatHandler, GenericMTMDChatHandler]


def test_every_family_has_a_layout_test() -> None:
    assert set(FAMILIES.values()) == {*IMAGE_FAMILIES, Qwen3ASRChatHandler}


@pytest.mark.parametrize("cls", LAYOUTS, ids=lambda cls: cls.__name__)
def test_the_family_layout(cls: type[MTMDChatHandler], mmproj: str, image: dict[str, Any]) -> None:
    handler = cls(mmproj_path=mmproj, verbose=False)
    assert render(handler, conversation(image)) == LAYOUTS[cls]


def test_paddleocr_ends_an_earlier_reply_with_eos(mmproj: str, image: dict[str, Any]) -> None:
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "OCR:"}]},
                {"role": "assistant", "content": "Total: 12"}, {"role": "user", "content": "Currency?"}]
    assert render(PaddleOCRChatHandler(mmproj_path=mmproj, verbose=False), messages) == (
        "<|begin_of_sentence|>User: <IMG>OCR:\nAssistant: Total: 12</s>User: Currency?\nAssistant: ")


def test_qwen3_asr_renders_the_audio_of_a_user_turn_and_not_its_text(
        audio_mmproj: str, tiny_wav: Callable[..., Path]) -> None:
    handler = Qwen3ASRChatHandler(mmproj_path=audio_mmproj, verbose=False)
    clip = tiny_wav(1.0)
    as_data = {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip.read_bytes()).decode(),
                                                      "format": "wav"}}
    for part in ({"type": "audio_url", "audio_url": {"url": str(clip)}}, as_data):
        messages = [{"role": "system", "content": "Names: Ada."},
                    {"role": "user", "content": [{"type": "text", "text": "transcribe this"}, part]}]
        assert render(handler, messages, shown="<AUDIO>") == (
            "<|im_start|>system\nNames: Ada.<|im_end|>\n<|im_start|>user\n<AUDIO><|im_end|>\n"
            "<|im_start|>assistant\n")
    # the model always gets a system turn, empty without instructions
    messages = [{"role": "user", "content": [as_data]}]
    assert render(handler, messages, shown="<AUDIO>") == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<AUDIO><|im_end|>\n<|im_start|>assistant\n")


def test_qwen3_asr_refuses_images(audio_mmproj: str, image: dict[str, Any]) -> None:
    handler = Qwen3ASRChatHandler(mmproj_path=audio_mmproj, verbose=False)
    handler.projector = attrs.evolve(handler.projector, vision=True)  # even a projector that takes images
    with pytest.raises(ValueError, match="takes audio only"):
        handler.render(FakeLlama(), conversation(image))


# -- enable_thinking, force_reasoning --------------------------------------------------------------------

#: class -> the prompt of ``conversation`` with enable_thinking=False (True is its layout above)
NOT_THINKING: dict[type[MTMDChatHandler], str] = {
    MiniCPMv45ChatHandler: _CHATML.format(user="<IMG>\nWhat is this?", generation="<think>\n\n</think>\n\n"),
    MiniCPMV46ChatHandler: _CHATML.format(user="<IMG>\nWhat is this?", generation="<think>\n\n</think>\n\n"),
    Qwen35ChatHandler: _CHATML.format(user="Picture 1: <IMG>What is this?", generation="<think>\n\n</think>\n\n"),
    Step3VLChatHandler: _CHATML.format(user="<IMG>What is this?", generation="<think>\n\n</think>\n"),
    GLM46VChatHandler: ("[gMASK]<sop><|system|>\nBe brief.<|user|>\n<IMG>What is this?/nothink<|assistant|>\n"
                        "<think></think>\n"),
    Gemma4ChatHandler: ("<s><|turn>system\nBe brief.<turn|>\n<|turn>user\n<IMG>What is this?<turn|>\n"
                        "<|turn>model\n<|channel>thought\n<channel|>"),
}


@pytest.mark.parametrize("cls", NOT_THINKING, ids=lambda cls: cls.__name__)
def test_enable_thinking_switches_the_prompt(cls: type[MTMDChatHandler], mmproj: str,
                                             image: dict[str, Any]) -> None:
    assert render(cls(mmproj_path=mmproj, verbose=False, enable_thinking=True), conversation(image)) == LAYOUTS[cls]
    quiet = cls(mmproj_path=mmproj, verbose=False, enable_thinking=False)
    assert render(quiet, conversation(image)) == NOT_THINKING[cls]
    # the request's chat_template_kwargs override the constructor's choice, both ways
    assert render(cls(mmproj_path=mmproj, verbose=False), conversation(image), enable_thinking=False) == \
        NOT_THINKING[cls]
    assert render(quiet, conversation(image), enable_thinking=True) == LAYOUTS[cls]


def test_gemma4_thinking_opens_the_system_turn(mmproj: str, image: dict[str, Any]) -> None:
    quiet = Gemma4ChatHandler(mmproj_path=mmproj, verbose=False, enable_thinking=False)
    thinking = Gemma4ChatHandler(mmproj_path=mmproj, verbose=False)
    no_system = conversation(image)[1:]
    assert render(quiet, no_system).startswith("<s><|turn>user\n")
    assert render(thinking, no_system).startswith("<s><|turn>system\n<|think|>\n<turn|>\n<|turn>user\n")


def test_glm_nothink_is_written_once(mmproj: str) -> None:
    handler = GLM46VChatHandler(mmproj_path=mmproj, verbose=False, enable_thinking=False)
    assert render(handler, [{"role": "user", "content": "Hi /nothink"}]) == (
        "[gMASK]<sop><|user|>\nHi /nothink<|assistant|>\n<think></think>\n")


def test_force_reasoning_opens_a_think_block(mmproj: str, image: dict[str, Any]) -> None:
    plain = render(Qwen3VLChatHandler(mmproj_path=mmproj, verbose=False), conversation(image))
    forced = render(Qwen3VLChatHandler(mmproj_path=mmproj, verbose=False, force_reasoning=True), conversation(image))
    assert plain.endswith("<|im_start|>assistant\n")
    assert forced == plain + "<think>\n"


# -- add_vision_id ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [Qwen3VLChatHandler, Qwen35ChatHandler], ids=lambda cls: cls.__name__)
def test_add_vision_id_numbers_pictures_across_the_conversation(cls: type[MTMDChatHandler], mmproj: str,
                                                                tiny_png: Callable[..., Path]) -> None:
    messages = [{"role": "user", "content": [picture(tiny_png, 1), {"type": "text", "text": "And"}]},
                {"role": "assistant", "content": "A."},
                {"role": "user", "content": [picture(tiny_png, 2), picture(tiny_png, 3),
                                             {"type": "text", "text": "these?"}]}]
    numbered = render(cls(mmproj_path=mmproj, verbose=False), messages)
    assert "user\nPicture 1: <IMG>And<|im_end|>" in numbered
    assert "user\nPicture 2: <IMG>Picture 3: <IMG>these?<|im_end|>" in numbered
    plain = render(cls(mmproj_path=mmproj, verbose=False, add_vision_id=False), messages)
    assert "Picture" not in plain
    assert "user\n<IMG>And<|im_end|>" in plain and "user\n<IMG><IMG>these?<|im_end|>" in plain


# -- earlier replies' reasoning ---------------------------------------------------------------------------

def _two_replies(image: dict[str, Any]) -> list[dict[str, Any]]:
    return [*conversation(image),
            {"role": "assistant", "content": "<think>\nfur\n</think>\n\nA cat."},
            {"role": "user", "content": "And now?"},
            {"role": "assistant", "content": "<think>\nears\n</think>\n\nStill a cat."},
            {"role": "user", "content": "Sure?"}]


def test_lfm25_keeps_only_the_latest_reply_reasoning_unless_keep_past_thinking(
        mmproj: str, image: dict[str, Any]) -> None:
    dropped = render(LFM25VLChatHandler(mmproj_path=mmproj, verbose=False), _two_replies(image))
    assert "<|im_start|>assistant\nA cat.<|im_end|>" in dropped and "fur" not in dropped
    assert "<|im_start|>assistant\n<think>\nears\n</think>\n\nStill a cat.<|im_end|>" in dropped
    kept = render(LFM25VLChatHandler(mmproj_path=mmproj, verbose=False, keep_past_thinking=True),
                  _two_replies(image))
    assert "<|im_start|>assistant\n<think>\nfur\n</think>\n\nA cat.<|im_end|>" in kept
    assert "<|im_start|>assistant\n<think>\nears\n</think>\n\nStill a cat.<|im_end|>" in kept


def test_qwen35_drops_earlier_reasoning_unless_preserve_thinking(mmproj: str, image: dict[str, Any]) -> None:
    dropped = render(Qwen35ChatHandler(mmproj_path=mmproj, verbose=False), _two_replies(image))
    assert "<|im_start|>assistant\nA cat.<|im_end|>\n" in dropped
    assert "<|im_start|>assistant\nStill a cat.<|im_end|>\n" in dropped
    assert "<think>\nfur" not in dropped and "ears" not in dropped
    kept = render(Qwen35ChatHandler(mmproj_path=mmproj, verbose=False, preserve_thinking=True), _two_replies(image))
    assert "<|im_start|>assistant\n<think>\nfur\n</think>\n\nA cat.<|im_end|>" in kept
    assert "<|im_start|>assistant\n<think>\nears\n</think>\n\nStill a cat.<|im_end|>" in kept


def test_python_side_options_follow_the_request(mmproj: str, image: dict[str, Any],
                                                tiny_png: Callable[..., Path]) -> None:
    """``add_vision_id`` and ``preserve_thinking`` change the text, not the template, and still follow a
    request's ``chat_template_kwargs`` (passed to ``render`` here) over the constructor's value."""
    handler = Qwen35ChatHandler(mmproj_path=mmproj, verbose=False)
    messages = [{"role": "user", "content": [picture(tiny_png, 1), {"type": "text", "text": "Hi"}]}]
    assert "Picture 1: " in render(handler, messages)
    assert "Picture" not in render(handler, messages, add_vision_id=False)
    assert "fur" in render(handler, _two_replies(image), preserve_thinking=True)
    assert "fur" not in render(handler, _two_replies(image))


def test_a_reply_generated_after_an_opened_think_block_loses_its_reasoning_too(
        mmproj: str, image: dict[str, Any]) -> None:
    # the prompt ended with "<think>\n", so the reply sent back has only the closing tag
    messages = [*conversation(image), {"role": "assistant", "content": "fur, ears\n</think>\n\nA cat."},
                {"role": "user", "content": "Sure?"}]
    assert "<|im_start|>assistant\nA cat.<|im_end|>" in render(Qwen35ChatHandler(mmproj_path=mmproj, verbose=False),
                                                              messages)


def test_replies_after_the_last_question_keep_their_reasoning(mmproj: str, image: dict[str, Any]) -> None:
    # a tool loop: the model is still answering the last question and works from its reasoning
    messages = [*conversation(image),
                {"role": "assistant", "content": "<think>\nlook it up\n</think>\n\nCalling."},
                {"role": "tool", "content": "a cat"}]
    prompt = render(Qwen35ChatHandler(mmproj_path=mmproj, verbose=False), messages)
    assert "<|im_start|>assistant\n<think>\nlook it up\n</think>\n\nCalling.<|im_end|>" in prompt


def test_glm41v_always_drops_earlier_reasoning(mmproj: str, image: dict[str, Any]) -> None:
    prompt = render(GLM41VChatHandler(mmproj_path=mmproj, verbose=False), _two_replies(image))
    assert prompt == ("[gMASK]<sop><|system|>\nBe brief.<|user|>\n<IMG>What is this?<|assistant|>\nA cat."
                      "<|user|>\nAnd now?<|assistant|>\nStill a cat.<|user|>\nSure?<|assistant|>\n")
    with pytest.raises(TypeError):
        GLM41VChatHandler(mmproj_path=mmproj, verbose=False, keep_past_thinking=True)


# -- controls, image_min_tokens ---------------------------------------------------------------------------

def test_granite_docling_controls_go_on_the_assistant_role(mmproj: str, image: dict[str, Any]) -> None:
    controls = {"mode": "document_parsing", "format": "json"}
    handler = GraniteDoclingChatHandler(mmproj_path=mmproj, verbose=False, controls=controls)
    assert render(handler, conversation(image)) == LAYOUTS[GraniteDoclingChatHandler].replace(
        "<|start_of_role|>assistant<|end_of_role|>",
        '<|start_of_role|>assistant {"mode": "document_parsing", "format": "json"}<|end_of_role|>')
    with pytest.raises(ValueError, match="controls must be a dict"):
        GraniteDoclingChatHandler(mmproj_path=mmproj, verbose=False, controls="json")


def test_lfm25_image_min_tokens_above_256_falls_back_with_a_warning(mmproj: str) -> None:
    with pytest.warns(UserWarning, match="image_min_tokens=300"):
        handler = LFM25VLChatHandler(mmproj_path=mmproj, verbose=False, image_min_tokens=300)
    assert handler.image_min_tokens == -1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert LFM25VLChatHandler(mmproj_path=mmproj, verbose=False, image_min_tokens=64,
                                  image_max_tokens=256).image_min_tokens == 64
        assert LFM2VLChatHandler(mmproj_path=mmproj, verbose=False, image_min_tokens=300).image_min_tokens == 300


# -- stop strings, template variables, templates -----------------------------------------------------------

@pytest.mark.parametrize("cls", [*IMAGE_FAMILIES, Qwen3ASRChatHandler], ids=lambda cls: cls.__name__)
def test_the_family_stop_strings_are_added(cls: type[MTMDChatHandler], mmproj: str) -> None:
    handler = cls(mmproj_path=mmproj, verbose=False)
    conversation_, _ = handler.prepare([{"role": "user", "content": "Hi"}])
    stop = handler.formatter(FakeLlama())(messages=conversation_, add_generation_prompt=True).stop
    assert stop[0] == "</s>"  # the model's EOS text, then the family's end strings once each
    assert set(handler.STOP) <= set(stop) and len(stop) == len(set(stop))


def test_extra_template_arguments_reach_the_template_and_the_request_overrides_them(mmproj: str) -> None:
    template = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ greeting }}|{{ enable_thinking }}"
    handler = Qwen35ChatHandler(mmproj_path=mmproj, verbose=False, chat_template_override=template,
                                extra_template_arguments={"greeting": "hello", "enable_thinking": False})
    messages = [{"role": "user", "content": "Hi"}]
    assert render(handler, messages) == "[user:Hi]hello|False"  # extra_template_arguments set a family switch too
    assert render(handler, messages, greeting="bye") == "[user:Hi]bye|False"
    assert handler.extra_template_arguments == {"greeting": "hello", "enable_thinking": False,
                                                "add_vision_id": True, "preserve_thinking": False}


MEDIA_TEMPLATE = "{# renders image parts #}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
TEXT_TEMPLATE = "{% for m in messages %}<<{{ m.role }}>>{{ m.content }}{% endfor %}"


@pytest.mark.parametrize("cls", [*IMAGE_FAMILIES, GenericMTMDChatHandler], ids=lambda cls: cls.__name__)
def test_chat_template_override_is_used_verbatim(cls: type[MTMDChatHandler], mmproj: str,
                                                 image: dict[str, Any]) -> None:
    # (a template must render the system message, or it is merged into the next one, as llama.cpp does)
    handler = cls(mmproj_path=mmproj, verbose=False,
                  chat_template_override="{{ messages[0].content }}|{{ messages[1].content }}!")
    llama = FakeLlama({"tokenizer.chat_template": MEDIA_TEMPLATE})
    expected = "Be brief.|Picture 1: <IMG>What is this?!" if cls in (Qwen3VLChatHandler, Qwen35ChatHandler) else \
        "Be brief.|<IMG>What is this?!"
    assert render(handler, conversation(image), llama) == expected


@pytest.mark.parametrize("cls", IMAGE_FAMILIES, ids=lambda cls: cls.__name__)
def test_families_use_the_model_template_only_where_it_renders_media(cls: type[MTMDChatHandler], mmproj: str,
                                                                     image: dict[str, Any]) -> None:
    handler = cls(mmproj_path=mmproj, verbose=False)
    shown = "Picture 1: <IMG>" if cls in (Qwen3VLChatHandler, Qwen35ChatHandler) else "<IMG>"
    assert render(handler, conversation(image), FakeLlama({"tokenizer.chat_template": MEDIA_TEMPLATE})) == \
        f"<system>Be brief.<user>{shown}What is this?"
    assert render(handler, conversation(image), FakeLlama({"tokenizer.chat_template": TEXT_TEMPLATE})) == \
        LAYOUTS[cls]


@pytest.mark.parametrize(("projector", "family"), [("mlp", Llava15ChatHandler), ("qwen2vl_merger", Qwen25VLChatHandler),
                                                   ("qwen2a", Qwen25VLChatHandler), ("idefics3", MTMDChatHandler)])
def test_without_a_template_the_projector_names_the_layout(tiny_mtmd_model: Callable[[str], tuple[Path, Path]],
                                                          projector: str, family: type[MTMDChatHandler]) -> None:
    handler = GenericMTMDChatHandler(mmproj_path=str(tiny_mtmd_model(projector)[1]), verbose=False)
    assert handler.template_for(FakeLlama()) == family.CHAT_FORMAT
    assert handler.STOP == family.STOP


def test_the_generic_handler_uses_the_model_template(mmproj: str, image: dict[str, Any]) -> None:
    handler = GenericMTMDChatHandler(mmproj_path=mmproj, verbose=False)
    assert render(handler, conversation(image), FakeLlama({"tokenizer.chat_template": TEXT_TEMPLATE})) == \
        "<<system>>Be brief.<<user>><IMG>What is this?"
    # a file without a template: the layout of the projector's family (gemma3 here), else the generic one
    assert render(handler, conversation(image)) == LAYOUTS[Gemma3ChatHandler]
    assert handler.STOP == Gemma3ChatHandler.STOP
    explicit = GenericMTMDChatHandler(chat_format="{{ messages | length }}: {{ messages[0].content }}|"
                                                  "{{ messages[1].content }}", mmproj_path=mmproj, verbose=False)
    assert render(explicit, conversation(image), FakeLlama({"tokenizer.chat_template": MEDIA_TEMPLATE})) == \
        "2: Be brief.|<IMG>What is this?"
    with pytest.raises(ValueError, match="chat_format must be a Jinja template string"):
        GenericMTMDChatHandler(chat_format=["not", "a", "template"], mmproj_path=mmproj, verbose=False)


def test_chat_template_name_picks_a_named_template(mmproj: str, image: dict[str, Any]) -> None:
    llama = FakeLlama({"tokenizer.chat_template": TEXT_TEMPLATE,
                       "tokenizer.chat_template.rag": "RAG {{ messages[0].content }}|{{ messages[1].content }}",
                       "tokenizer.chat_template.tool_use": "TOOLS"})
    named = GenericMTMDChatHandler(mmproj_path=mmproj, verbose=False, chat_template_name="rag")
    assert render(named, conversation(image), llama) == "RAG Be brief.|<IMG>What is this?"
    default = GenericMTMDChatHandler(mmproj_path=mmproj, verbose=False, chat_template_name="default")
    assert render(default, conversation(image), llama) == "<<system>>Be brief.<<user>><IMG>What is this?"
    unknown = GenericMTMDChatHandler(mmproj_path=mmproj, verbose=False, chat_template_name="vision")
    with pytest.raises(ValueError, match="chat_template_name='vision'.*it has: default, rag, tool_use"):
        unknown.render(llama, conversation(image))


# -- markers typed by users ------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [*LAYOUTS, GenericMTMDChatHandler], ids=lambda cls: cls.__name__)
def test_a_typed_marker_stays_text(cls: type[MTMDChatHandler], mmproj: str, image: dict[str, Any]) -> None:
    handler = cls(mmproj_path=mmproj, verbose=False)
    typed = f"{handler.marker} <image> <__media__> <|image_pad|>"
    messages = [{"role": "system", "content": f"sys {handler.marker}"},
                {"role": "user", "name": handler.marker, "content": [{"type": "text", "text": typed}, image]},
                {"role": "assistant", "content": f"saw {handler.marker}"},
                {"role": "user", "content": typed}]
    prompt, media = handler.render(FakeLlama(), messages)
    assert len(media) == 1 and prompt.count(handler.marker) == 1
    assert "<image> <__media__> <|image_pad|>" in prompt


def test_a_typed_marker_stays_text_for_qwen3_asr(audio_mmproj: str, tiny_wav: Callable[..., Path]) -> None:
    handler = Qwen3ASRChatHandler(mmproj_path=audio_mmproj, verbose=False)
    messages = [{"role": "system", "content": f"Context: {handler.marker} <audio> <__media__>"},
                {"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": str(tiny_wav(1.0))}}]}]
    prompt, media = handler.render(FakeLlama(), messages)
    assert len(media) == 1 and prompt.count(handler.marker) == 1
    assert "<audio> <__media__>" in prompt


# -- the constructor -------------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda cls: cls.__name__)
def test_the_constructor_checks_its_arguments(cls: type[MTMDChatHandler], mmproj: str) -> None:
    with pytest.raises(ValueError, match="needs mmproj_path"):
        cls(verbose=False)
    assert cls(clip_model_path=mmproj, verbose=False).mmproj_path == mmproj
    with pytest.raises(TypeError):
        cls(mmproj_path=mmproj, verbose=False, no_such_option=True)
    with pytest.raises(ValueError, match="image_max_tokens .* is below image_min_tokens"):
        cls(mmproj_path=mmproj, verbose=False, image_min_tokens=128, image_max_tokens=64)


def test_a_continued_message_of_a_model_family_is_its_llama_cpp_parsers_turn(mmproj: str) -> None:
    """The formatter is made once per model and template and shows its template's source, so a continued
    message is written as llama.cpp's parser of the template's family writes it (Gemma 4's thought channel)."""
    gemma4 = ("{# '<|tool_call>call:' #}{% for m in messages %}<|turn>{{ 'model' if m.role == 'assistant' else "
              "m.role }}\n{{ m.content }}<turn|>\n{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}")
    handler = Gemma4ChatHandler(mmproj_path=mmproj, verbose=False, chat_template_override=gemma4)
    llama = FakeLlama()
    assert handler.formatter(llama) is handler.formatter(llama) and handler.formatter(llama).template == gemma4
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure"}]
    rendered = handler.render_chat_prompt(llama=llama, messages=messages, assistant_prefill=True)
    assert rendered.prompt.endswith("<|turn>user\nHi<turn|>\n<|turn>model\n<|channel>thought\n<channel|>Sure")
