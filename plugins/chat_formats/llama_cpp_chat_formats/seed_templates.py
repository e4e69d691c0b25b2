"""The chat templates and special tokens llama-cpp-python names in ``llama_chat_format`` (``CHATML_*``,
``MISTRAL_INSTRUCT_*``, ``LLAMA3_*``...), and the guess it makes from a GGUF's template.

The guess only recognizes these exact templates; ``Llama`` does not need it (a model's own template
renders through the Jinja formatter either way), it is here for code that calls it.
"""

from __future__ import annotations

from typing import Mapping

CHATML_CHAT_TEMPLATE = (
    '{% for message in messages %}'
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CHATML_BOS_TOKEN = "<s>"
CHATML_EOS_TOKEN = "<|im_end|>"

MISTRAL_INSTRUCT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token + ' ' }}{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

MISTRAL_INSTRUCT_BOS_TOKEN = "<s>"
MISTRAL_INSTRUCT_EOS_TOKEN = "</s>"

MIXTRAL_INSTRUCT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}"
    "{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    '{% set loop_messages = messages %}{% for message in loop_messages %}'
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}"
    '{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}'
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

LLAMA4_INSTRUCT_BOS_TOKEN = "<|begin_of_text|>"
LLAMA4_INSTRUCT_EOS_TOKEN = "<|eot|>"

LLAMA4_INSTRUCT_CHAT_TEMPLATE = (
    '{% if custom_tools is defined %}\n'
    '    {% set tools = custom_tools %}\n'
    '{% endif %}\n'
    '{% if not tools_in_user_message is defined %}\n'
    '    {% set tools_in_user_message = true %}\n'
    '{% endif %}\n'
    '{% if not date_string is defined %}\n'
    '    {% if strftime_now is defined %}\n'
    '        {% set date_string = strftime_now("%d %b %Y") %}\n'
    '    {% else %}\n'
    '        {% set date_string = "26 Jul 2024" %}\n'
    '    {% endif %}\n'
    '{% endif %}\n'
    '{% if not tools is defined %}\n'
    '    {% set tools = none %}\n'
    '{% endif %}\n'
    '\n'
    '{#- This block extracts the system message, so we can slot it into the right place. #}\n'
    "{% if messages[0]['role'] == 'system' %}    \n"
    "    {% if messages[0]['content'] is string %}\n"
    "        {% set system_message = messages[0]['content']|trim %}\n"
    '    {% else %}\n'
    '        {#- FIXME: The processor requires an array, always. #}\n'
    "        {% set system_message = messages[0]['content'][0]['text']|trim %}\n"
    '    {% endif %}\n'
    '    {% set messages = messages[1:] %}\n'
    '    {% set user_supplied_system_message = true %}\n'
    '{% else %}\n'
    '    {% set system_message = "" %}\n'
    '    {% set user_supplied_system_message = false %}\n'
    '{% endif %}\n'
    '\n'
    '{#- System message if the user supplied one #}\n'
    '{% if user_supplied_system_message %}\n'
    '    {{ "<|header_start|>system<|header_end|>\\n\\n" }}\n'
    '    {% if tools is not none %}\n'
    '        {{ "Environment: ipython\\n" }}\n'
    '    {% endif %}\n'
    '    {% if tools is not none and not tools_in_user_message %}\n'
    '        {{ "You have access to the following functions. To call a function, please respond with JSON for a function call." }}\n'
    '        {{ \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
    '        {{ "Do not use variables.\\n\\n" }}\n'
    '        {% for t in tools %}\n'
    '            {{ t | tojson(indent=4) }}\n'
    '            {{ "\\n\\n" }}\n'
    '        {% endfor %}\n'
    '    {% endif %}\n'
    '    {{ system_message }}\n'
    '    {{ "<|eot|>" }}\n'
    '{% endif %}\n'
    '\n'
    '{#- Custom tools are passed in a user message with some extra guidance #}\n'
    '{% if tools_in_user_message and not tools is none %}\n'
    '    {#- Extract the first user message so we can plug it in here #}\n'
    '    {% if messages | length != 0 %}\n'
    "        {% set first_user_message = messages[0]['content']|trim %}\n"
    '        {% set messages = messages[1:] %}\n'
    '    {% else %}\n'
    '        {{ raise_exception("Cannot put tools in the first user message when there\'s no first user message!") }}\n'
    '{% endif %}\n'
    "    {{ '<|header_start|>user<|header_end|>\\n\\n' -}}\n"
    '    {{ "Given the following functions, please respond with a JSON for a function call " }}\n'
    '    {{ "with its proper arguments that best answers the given prompt.\\n\\n" }}\n'
    '    {{ \'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.\' }}\n'
    '    {{ "Do not use variables.\\n\\n" }}\n'
    '    {% for t in tools %}\n'
    '        {{ t | tojson(indent=4) }}\n'
    '        {{ "\\n\\n" }}\n'
    '    {% endfor %}\n'
    '    {{ first_user_message + "<|eot|>"}}\n'
    '{% endif %}\n'
    '\n'
    '{% for message in messages %}\n'
    "    {% if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n"
    "    {{ '<|header_start|>' + message['role'] + '<|header_end|>\\n\\n' }}\n"
    "        {% if message['content'] is string %}\n"
    "            {{ message['content'] }}\n"
    '        {% else %}\n'
    "            {% for content in message['content'] %}\n"
    "                {% if content['type'] == 'image' %}\n"
    "                    {{ '<|image|>' }}\n"
    "                {% elif content['type'] == 'text' %}\n"
    "                    {{ content['text'] }}\n"
    '                {% endif %}\n'
    '            {% endfor %}\n'
    '        {% endif %}\n'
    '        {{ "<|eot|>" }}\n'
    "    {% elif 'tool_calls' in message and message.tool_calls|length > 0 %}\n"
    "       {{ '<|header_start|>assistant<|header_end|>\\n\\n' -}}\n"
    "       {{ '<|python_start|>' }}\n"
    "        {% if message['content'] is string %}\n"
    "            {{ message['content'] }}\n"
    '        {% else %}\n'
    "            {% for content in message['content'] %}\n"
    "                {% if content['type'] == 'image' %}\n"
    "                    {{ '<|image|>' }}\n"
    "                {% elif content['type'] == 'text' %}\n"
    "                    {{ content['text'] }}\n"
    '                {% endif %}\n'
    '            {% endfor %}\n'
    '        {% endif %}\n'
    "       {{ '<|python_end|>' }}\n"
    '        {% for tool_call in message.tool_calls %}\n'
    '           {{ \'{"name": "\' + tool_call.function.name + \'", \' }}\n'
    '           {{ \'"parameters": \' }}\n'
    '           {{ tool_call.function.arguments | tojson }}\n'
    '           {{ "}" }}\n'
    '        {% endfor %}\n'
    '       {{ "<|eot|>" }}\n'
    '    {% elif message.role == "tool" or message.role == "ipython" %}\n'
    '        {{ "<|header_start|>ipython<|header_end|>\\n\\n" }}\n'
    '        {% if message.content is mapping or message.content is iterable %}\n'
    '            {{ message.content | tojson }}\n'
    '        {% else %}\n'
    '            {{ message.content }}\n'
    '        {% endif %}\n'
    '        {{ "<|eot|>" }}\n'
    '    {% endif %}\n'
    '{% endfor %}\n'
    '{% if add_generation_prompt %}\n'
    "    {{ '<|header_start|>assistant<|header_end|>\\n\\n' }}\n"
    '{% endif %}\n'
)

GPT_OSS_BOS_TOKEN = "<|startoftext|>"
GPT_OSS_EOS_TOKEN = "<|return|>"
GPT_OSS_PAD_TOKEN = "<|endoftext|>"

#: The templates the guess recognizes, and the format each one is.
_KNOWN = {CHATML_CHAT_TEMPLATE: "chatml", MISTRAL_INSTRUCT_CHAT_TEMPLATE: "mistral-instruct",
          MIXTRAL_INSTRUCT_CHAT_TEMPLATE: "mistral-instruct", LLAMA3_INSTRUCT_CHAT_TEMPLATE: "llama-3"}


def guess_chat_format_from_gguf_metadata(metadata: Mapping[str, str]) -> str | None:
    """The named format whose template a GGUF's ``tokenizer.chat_template`` is, exactly (``chatml``,
    ``mistral-instruct``, ``llama-3``); None for any other template, or none."""
    return _KNOWN.get(metadata.get("tokenizer.chat_template", ""))
