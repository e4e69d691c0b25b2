"""``create_chat_completion``: choose the chat handler, pass the whole request on.

Selection, as in llama-cpp-python: the instance's ``chat_handler``, else the
chat format by name (``chat_format=`` or claimed by a plugin from the GGUF
metadata), else the model's own template (``tokenizer.chat_template``), else
``llama-2``.  ``chat_format="chat_template.<name>"`` picks one of the GGUF's
named templates; the format registered as ``chat_template`` renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

from .llama_chat_format import LlamaChatCompletionHandlerNotFoundException, get_chat_completion_handler

if TYPE_CHECKING:
    from .llama import Llama

GGUF_TEMPLATE_FORMAT = "chat_template"


class ChatAPI:
    """The chat methods of :class:`llama_cpp.Llama`."""

    def _resolve_chat_handler(self: "Llama") -> tuple[Any, dict[str, Any]]:
        if self.chat_handler is not None:
            return self.chat_handler, {}
        name = self.chat_format
        if name is None:
            name = "chat_template.default" if "tokenizer.chat_template" in self.metadata else "llama-2"
        if name.startswith(GGUF_TEMPLATE_FORMAT + "."):
            return get_chat_completion_handler(GGUF_TEMPLATE_FORMAT), {"chat_template_name": name.split(".", 1)[1]}
        return get_chat_completion_handler(name), {}

    def create_chat_completion(
        self: "Llama",
        messages: list[dict[str, Any]],
        functions: list[dict[str, Any]] | None = None,
        function_call: str | dict[str, Any] | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        temperature: float = 0.2,
        top_p: float = 0.95,
        top_k: int = 40,
        min_p: float = 0.05,
        typical_p: float = 1.0,
        stream: bool = False,
        stop: str | list[str] | None = None,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        repeat_penalty: float = 1.0,
        model: str | None = None,
        logit_bias: dict[int, float] | None = None,
        logprobs: bool | None = None,
        top_logprobs: int | None = None,
        assistant_prefill: bool = False,
        add_generation_prompt: bool = True,
        chat_template_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any] | Iterator[dict[str, Any]]:
        """A chat completion in the OpenAI shape (chat.completion, or chunks with ``stream``).

        Every keyword reaches the handler, including the sampler parameters,
        ``active_loras``/``control_vector`` and ``chat_template_kwargs`` (extra
        template variables such as ``enable_thinking``, merged over the ones
        given to the constructor).
        """
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ValueError("messages must be a list of {'role': ..., 'content': ...} dicts")
        if "present_penalty" in kwargs:  # the reference's spelling
            presence_penalty = kwargs.pop("present_penalty")
        handler, extra = self._resolve_chat_handler()
        template_kwargs = {**self.chat_template_kwargs, **(chat_template_kwargs or {})}
        return handler(
            llama=self, messages=messages, functions=functions, function_call=function_call, tools=tools,
            tool_choice=tool_choice, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
            typical_p=typical_p, stream=stream, stop=stop, seed=seed, response_format=response_format,
            max_tokens=max_tokens, presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty, model=model, logit_bias=logit_bias, logprobs=logprobs,
            top_logprobs=top_logprobs, assistant_prefill=assistant_prefill,
            add_generation_prompt=add_generation_prompt, chat_template_kwargs=template_kwargs, **extra, **kwargs,
        )

    def create_chat_completion_openai_v1(self: "Llama", *args: Any, **kwargs: Any) -> Any:
        """``create_chat_completion`` returning the openai package's typed objects."""
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError as exc:
            raise ImportError("create_chat_completion_openai_v1 needs the openai package: pip install openai") from exc
        result = self.create_chat_completion(*args, **kwargs)
        if kwargs.get("stream"):
            return (ChatCompletionChunk.model_validate(chunk) for chunk in result)
        return ChatCompletion.model_validate(result)


__all__ = ["ChatAPI", "LlamaChatCompletionHandlerNotFoundException"]
