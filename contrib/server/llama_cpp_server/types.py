"""The reference server's request and response types under its names (``llama_cpp.server.types``).

They are this server's own models (:mod:`.schemas` for the request bodies, :mod:`.responses` for the
answers, which only document): code that imports the reference's names gets the classes the server really
validates with.  The bodies take more fields than the reference's (every sampler parameter of the core) and
refuse unknown ones.
"""

from __future__ import annotations

from .responses import ChatMessageParam as ChatCompletionRequestMessage
from .responses import Detokenized as DetokenizeInputResponse
from .responses import Model as ModelData
from .responses import ModelList
from .responses import TokenCount as TokenizeInputCountResponse
from .responses import Tokens as TokenizeInputResponse
from .schemas import ChatRequest as CreateChatCompletionRequest
from .schemas import CompletionRequest as CreateCompletionRequest
from .schemas import DetokenizeRequest as DetokenizeInputRequest
from .schemas import EmbeddingRequest as CreateEmbeddingRequest
from .schemas import TokenizeRequest as TokenizeInputRequest

__all__ = ["ChatCompletionRequestMessage", "CreateChatCompletionRequest", "CreateCompletionRequest",
           "CreateEmbeddingRequest", "DetokenizeInputRequest", "DetokenizeInputResponse", "ModelData", "ModelList",
           "TokenizeInputCountResponse", "TokenizeInputRequest", "TokenizeInputResponse"]
