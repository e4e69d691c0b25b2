"""Typed shapes of requests and responses (OpenAI-compatible), for type checkers.

Everything the API returns is a plain dict; these TypedDicts describe them so
that code written against llama-cpp-python's ``llama_types`` keeps its
annotations (``from llama_cpp.llama_types import ChatCompletion``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, Union

from typing_extensions import NotRequired, TypedDict

JsonType = Union[None, int, str, bool, List[Any], Dict[str, Any]]

# -- text completion -----------------------------------------------------------------


class CompletionLogprobs(TypedDict):
    text_offset: List[int]
    token_logprobs: List[Optional[float]]
    tokens: List[str]
    top_logprobs: List[Optional[Dict[str, float]]]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[Literal["stop", "length", "abort"]]


class PromptTokensDetails(TypedDict):
    cached_tokens: NotRequired[int]
    audio_tokens: NotRequired[int]


class CompletionTokensDetails(TypedDict):
    reasoning_tokens: NotRequired[int]
    audio_tokens: NotRequired[int]
    accepted_prediction_tokens: NotRequired[int]
    rejected_prediction_tokens: NotRequired[int]


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: NotRequired[PromptTokensDetails]
    completion_tokens_details: NotRequired[CompletionTokensDetails]


class CreateCompletionResponse(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: NotRequired[CompletionUsage]


Completion = CreateCompletionResponse
CreateCompletionStreamResponse = CreateCompletionResponse
CompletionChunk = CreateCompletionResponse

# -- chat ------------------------------------------------------------------------


class ChatCompletionFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: Dict[str, JsonType]


class ChatCompletionToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: NotRequired[Dict[str, JsonType]]


class ChatCompletionTool(TypedDict):
    type: Literal["function"]
    function: ChatCompletionToolFunction


class ChatCompletionNamedToolChoiceFunction(TypedDict):
    name: str


class ChatCompletionNamedToolChoice(TypedDict):
    type: Literal["function"]
    function: ChatCompletionNamedToolChoiceFunction


ChatCompletionToolChoiceOption = Union[Literal["none", "auto", "required"], ChatCompletionNamedToolChoice]


class ChatCompletionRequestFunctionCallOption(TypedDict):
    name: str


ChatCompletionRequestFunctionCall = Union[Literal["none", "auto"], ChatCompletionRequestFunctionCallOption]


class ChatCompletionMessageToolCallFunction(TypedDict):
    name: str
    arguments: str


class ChatCompletionMessageToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ChatCompletionMessageToolCallFunction


ChatCompletionMessageToolCalls = List[ChatCompletionMessageToolCall]


class ChatCompletionResponseFunctionCall(TypedDict):
    name: str
    arguments: str


class ChatCompletionResponseMessage(TypedDict):
    role: Literal["assistant", "function"]
    content: Optional[str]
    tool_calls: NotRequired[ChatCompletionMessageToolCalls]
    function_call: NotRequired[ChatCompletionResponseFunctionCall]


class ChatCompletionTopLogprobToken(TypedDict):
    token: str
    logprob: float
    bytes: Optional[List[int]]


class ChatCompletionLogprobToken(ChatCompletionTopLogprobToken):
    top_logprobs: List[ChatCompletionTopLogprobToken]


class ChatCompletionLogprobs(TypedDict):
    content: Optional[List[ChatCompletionLogprobToken]]
    refusal: Optional[List[ChatCompletionLogprobToken]]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[str]


class CreateChatCompletionResponse(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatCompletionResponseChoice]
    usage: CompletionUsage


ChatCompletion = CreateChatCompletionResponse


class ChatCompletionStreamResponseDeltaEmpty(TypedDict):
    pass


class ChatCompletionMessageToolCallChunkFunction(TypedDict):
    name: NotRequired[Optional[str]]
    arguments: str


class ChatCompletionMessageToolCallChunk(TypedDict):
    index: int
    id: NotRequired[str]
    type: Literal["function"]
    function: ChatCompletionMessageToolCallChunkFunction


class ChatCompletionStreamResponseDelta(TypedDict):
    content: NotRequired[Optional[str]]
    function_call: NotRequired[Optional[ChatCompletionResponseFunctionCall]]
    tool_calls: NotRequired[Optional[List[ChatCompletionMessageToolCallChunk]]]
    role: NotRequired[Optional[Literal["system", "user", "assistant", "tool"]]]


class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: Union[ChatCompletionStreamResponseDelta, ChatCompletionStreamResponseDeltaEmpty]
    finish_reason: Optional[str]
    logprobs: NotRequired[Optional[ChatCompletionLogprobs]]


class CreateChatCompletionStreamResponse(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatCompletionStreamResponseChoice]
    usage: NotRequired[CompletionUsage]


ChatCompletionChunk = CreateChatCompletionStreamResponse

# -- chat requests -----------------------------------------------------------------------


class ChatCompletionRequestMessageContentPartText(TypedDict):
    type: Literal["text"]
    text: str


class ChatCompletionRequestMessageContentPartImageImageUrl(TypedDict):
    url: str
    detail: NotRequired[Literal["auto", "low", "high"]]


class ChatCompletionRequestMessageContentPartImage(TypedDict):
    type: Literal["image_url"]
    image_url: Union[str, ChatCompletionRequestMessageContentPartImageImageUrl]


ChatCompletionRequestMessageContentPart = Union[
    ChatCompletionRequestMessageContentPartText, ChatCompletionRequestMessageContentPartImage
]


class ChatCompletionRequestSystemMessage(TypedDict):
    role: Literal["system"]
    content: Optional[str]


class ChatCompletionRequestUserMessage(TypedDict):
    role: Literal["user"]
    content: Optional[Union[str, List[ChatCompletionRequestMessageContentPart]]]


class ChatCompletionRequestAssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[Optional[str]]
    tool_calls: NotRequired[ChatCompletionMessageToolCalls]
    function_call: NotRequired[ChatCompletionResponseFunctionCall]


class ChatCompletionRequestToolMessage(TypedDict):
    role: Literal["tool"]
    content: Optional[str]
    tool_call_id: str


class ChatCompletionRequestFunctionMessage(TypedDict):
    role: Literal["function"]
    content: Optional[str]
    name: str


ChatCompletionRequestMessage = Union[
    ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestToolMessage, ChatCompletionRequestFunctionMessage,
]


class ChatCompletionRequestResponseFormat(TypedDict):
    type: Literal["text", "json_object", "json_schema"]
    schema: NotRequired[JsonType]
    json_schema: NotRequired[Dict[str, JsonType]]


# -- embeddings ------------------------------------------------------------------------


class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int
    completion_tokens: NotRequired[int]  # LlamaEmbedding's "json" format: always 0


class Embedding(TypedDict):
    object: Literal["embedding"]
    # a vector; a token matrix without pooling; a score under rank pooling; base64 float32 on request
    embedding: Union[List[float], List[List[float]], float, str]
    index: int


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    data: List[Embedding]
    model: str
    usage: EmbeddingUsage
    cosineSimilarity: NotRequired[List[List[float]]]  # LlamaEmbedding's "json+" format

# -- the rest of the seed's shapes: OpenAI's message parts, tool kinds (custom, MCP) and aliases ----


class ChatCompletionResponseMessageFunctionCall(TypedDict):
    arguments: str
    name: str


class ChatCompletionResponseMessageAudio(TypedDict):
    id: str
    expires_at: int
    data: str
    transcript: str


class ChatCompletionResponseMessageAnnotationURLCitation(TypedDict):
    end_index: int
    start_index: int
    url: str
    title: str


class ChatCompletionResponseMessageAnnotation(TypedDict):
    type: Literal["url_citation"]
    url_citation: ChatCompletionResponseMessageAnnotationURLCitation


ServiceTier = Literal["auto", "default", "flex", "scale", "priority"]


class ChatCompletionStreamResponseDeltaFunctionCall(TypedDict):
    name: str
    arguments: str


ChatCompletionRole = Literal[
    "developer",
    "system",
    "user",
    "assistant",
    "tool",
    "function"
]


class ChatCompletionFunctions(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: Dict[str, JsonType]


class ChatCompletionFunctionCallOption(TypedDict):
    name: str


class ChatCompletionResponseFormatJSONSchema(TypedDict):
    name: str
    description: NotRequired[str]
    schema: NotRequired[Dict[str, Any]]
    strict: NotRequired[Optional[bool]]


class ChatCompletionRequestMessageContentPartInputAudioData(TypedDict):
    data: str
    format: Literal["wav", "mp3"]


class ChatCompletionRequestMessageContentPartAudio(TypedDict):
    type: Literal["input_audio"]
    input_audio: ChatCompletionRequestMessageContentPartInputAudioData


class ChatCompletionRequestMessageContentPartFileData(TypedDict):
    filename: NotRequired[str]
    file_data: NotRequired[str]
    file_id: NotRequired[str]


class ChatCompletionRequestMessageContentPartFile(TypedDict):
    type: Literal["file"]
    file: ChatCompletionRequestMessageContentPartFileData


class ChatCompletionRequestMessageContentPartRefusal(TypedDict):
    type: Literal["refusal"]
    refusal: str


class ChatCompletionRequestDeveloperMessage(TypedDict):
    role: Literal["developer"]
    content: Optional[str]


class ChatCompletionMessageCustomToolCallCustom(TypedDict):
    """The custom tool that the model called."""
    name: str
    input: str


class ChatCompletionMessageCustomToolCall(TypedDict):
    """A call to a custom tool created by the model."""
    id: str
    type: Literal["custom"]
    custom: ChatCompletionMessageCustomToolCallCustom


MCPConnectorID = Literal[
    "connector_dropbox",
    "connector_gmail",
    "connector_googlecalendar",
    "connector_googledrive",
    "connector_microsoftteams",
    "connector_outlookcalendar",
    "connector_outlookemail",
    "connector_sharepoint"
]


MCPToolCallStatus = Literal["in_progress", "completed", "incomplete", "calling", "failed"]


class MCPToolCall(TypedDict):
    """An invocation of a tool on an MCP server."""
    type: Literal["mcp_call"]
    id: str
    server_label: str
    name: str
    arguments: str  # JSON string
    output: NotRequired[Optional[str]]
    error: NotRequired[Optional[str]]
    status: NotRequired[MCPToolCallStatus]
    approval_request_id: NotRequired[Optional[str]]


class MCPListToolsTool(TypedDict):
    """A tool available on an MCP server."""
    name: str
    description: Optional[str]
    input_schema: Dict[str, Any]  # The JSON schema describing the tool's input
    annotations: Optional[Dict[str, Any]]


class MCPListTools(TypedDict):
    """A list of tools available on an MCP server."""
    type: Literal["mcp_list_tools"]
    id: str
    server_label: str
    tools: List[MCPListToolsTool]
    error: Optional[str]


class MCPToolFilter(TypedDict):
    """A filter object to specify which tools are allowed."""
    tool_names: NotRequired[List[str]]
    read_only: NotRequired[bool]


class MCPToolApprovalFilter(TypedDict, total=False):
    """Specify which of the MCP server's tools require approval based on filters."""
    always: MCPToolFilter
    never: MCPToolFilter


class MCPTool(TypedDict):
    """
    Give the model access to additional tools via remote Model Context Protocol (MCP) servers.
    """
    # The type of the MCP tool. Always `mcp`.
    type: Literal["mcp"]
    # A label for this MCP server, used to identify it in tool calls.
    server_label: str
    # The URL for the MCP server. One of `server_url` or `connector_id` must be provided.
    server_url: NotRequired[str]
    connector_id: NotRequired[MCPConnectorID]
    authorization: NotRequired[str]
    server_description: NotRequired[str]
    headers: NotRequired[Optional[Dict[str, str]]]
    # List of allowed tool names or a filter object.
    allowed_tools: NotRequired[Optional[Union[List[str], MCPToolFilter]]]
    # Specify which of the MCP server's tools require approval.
    require_approval: NotRequired[Optional[Union[Literal["always", "never"], MCPToolApprovalFilter]]]
    # Whether this MCP tool is deferred and discovered via tool search.
    defer_loading: NotRequired[bool]


class ChatCompletionRequestAssistantMessageFunctionCall(TypedDict):
    arguments: str
    name: str


ChatCompletionFunctionParameters = Dict[str, JsonType]


class ChatCompletionAllowedTools(TypedDict):
    mode: Literal["auto", "required"]
    tools: List[Dict[str, Any]]


class ChatCompletionAllowedToolsChoice(TypedDict):
    type: Literal["allowed_tools"]
    allowed_tools: ChatCompletionAllowedTools


class ChatCompletionNamedToolChoiceCustomObject(TypedDict):
    name: str


class ChatCompletionNamedToolChoiceCustom(TypedDict):
    type: Literal["custom"]
    custom: ChatCompletionNamedToolChoiceCustomObject


EmbeddingData = Embedding


ChatCompletionMessage = ChatCompletionResponseMessage


ChatCompletionChoice = ChatCompletionResponseChoice


ChatCompletionChunkDeltaEmpty = ChatCompletionStreamResponseDeltaEmpty


ChatCompletionChunkChoice = ChatCompletionStreamResponseChoice


ChatCompletionChunkDelta = ChatCompletionStreamResponseDelta


ChatCompletionStreamResponse = CreateChatCompletionStreamResponse


ChatCompletionResponseFunction = ChatCompletionFunction


ChatCompletionFunctionCall = ChatCompletionResponseFunctionCall


__all__ = [name for name in list(globals()) if name[0].isupper() and name not in {
    "Any", "Dict", "List", "Literal", "Optional", "Union", "NotRequired", "TypedDict"}]
