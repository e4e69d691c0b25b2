"""The chat page at ``/``, driven in headless Chromium through Playwright against a real server.

The browser is Debian's Chromium (``noxfile.py`` installs it), not one Playwright downloads.  The tiny
random model writes gibberish, so the tests check the page's behaviour, not the text: the model picker,
streamed text in the assistant's message, the history sent with each request, Stop (the UI goes idle and
the server frees the sequence), API keys, and that the page asks nothing of any other host.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from serving import metric, wait_until
from playwright.sync_api import Browser, Locator, Page, Request, expect, sync_playwright

# how long the page may take to show what a test waits for (the tiny model is fast, but a loaded machine
# with few cores can make its first tokens slow)
WAIT_MS = 15_000


@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    """Headless Chromium from the system (``--no-sandbox``: the tests may run as root)."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("the chat page's tests need Chromium on PATH as 'chromium' (Debian: apt-get install chromium; "
                    "`nox -s tests` installs it)")
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield browser
        browser.close()


class ChatPage:
    """A fresh browser context on the server's chat page, recording every request it makes and every
    script error it raises."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.base_url = base_url
        self.context = browser.new_context()
        self.page: Page = self.context.new_page()
        self.requests: list[str] = []
        self.chat_bodies: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.page.on("request", self._record)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.set_default_timeout(WAIT_MS)
        self.page.goto(base_url + "/")

    def _record(self, request: Request) -> None:
        self.requests.append(request.url)
        if request.url.endswith("/v1/chat/completions"):
            self.chat_bodies.append(json.loads(request.post_data or "{}"))

    def send(self, text: str) -> None:
        """Type ``text`` in the message box and press Send."""
        self.page.get_by_label("Message").fill(text)
        self.page.get_by_role("button", name="Send").click()

    def assistant(self) -> Locator:
        """The last assistant message's text element."""
        return self.page.locator(".message.assistant .content").last

    def expect_idle(self) -> None:
        expect(self.page.get_by_role("button", name="Stop")).to_be_disabled()
        expect(self.page.get_by_role("button", name="Send")).to_be_enabled()

    def close(self) -> None:
        self.context.close()


@pytest.fixture
def open_page(chromium: Browser) -> Iterator[Callable[[str], ChatPage]]:
    """``open_page(base_url)`` -> a :class:`ChatPage`; at the end, checks that no page asked another host
    for anything and that no script failed."""
    pages: list[ChatPage] = []

    def make(base_url: str) -> ChatPage:
        pages.append(ChatPage(chromium, base_url))
        return pages[-1]

    yield make
    try:
        for chat in pages:
            foreign = [url for url in chat.requests if not url.startswith(chat.base_url + "/")]
            assert not foreign, f"the page asked other hosts: {foreign}"
            assert not chat.errors, f"script errors: {chat.errors}"
    finally:
        for chat in pages:
            chat.close()


def test_the_page_asks_only_its_server(serve: Callable[..., Any], open_page: Callable[[str], ChatPage]) -> None:
    """Everything is inline: loading the page fetches the page and the model list, nothing else."""
    with serve() as base_url:
        chat = open_page(base_url)
        expect(chat.page.locator("#model option")).to_have_text(["tiny"])
        chat.page.wait_for_load_state("networkidle")
        assert chat.requests == [f"{base_url}/", f"{base_url}/v1/models"]


def test_chat_streams_the_reply_and_sends_the_history(serve: Callable[..., Any],
                                                     open_page: Callable[[str], ChatPage]) -> None:
    with serve() as base_url:
        chat = open_page(base_url)
        expect(chat.page.locator("#model option")).to_have_text(["tiny"])
        chat.page.get_by_label("Max tokens").fill("24")
        chat.send("Hello <b>there</b>")

        expect(chat.assistant()).not_to_be_empty()
        chat.expect_idle()
        expect(chat.page.locator(".message.user .content")).to_have_text("Hello <b>there</b>")  # as text
        first_reply = chat.assistant().text_content()
        assert first_reply and first_reply.strip()
        assert chat.chat_bodies[0] == {"model": "tiny", "stream": True, "max_tokens": 24,
                                       "messages": [{"role": "user", "content": "Hello <b>there</b>"}]}

        chat.page.get_by_label("Message").fill("And again")
        chat.page.get_by_label("Message").press("Enter")  # Enter sends too
        expect(chat.page.locator(".message.assistant")).to_have_count(2)
        chat.expect_idle()
        assert chat.chat_bodies[1]["messages"] == [
            {"role": "user", "content": "Hello <b>there</b>"},
            {"role": "assistant", "content": first_reply},
            {"role": "user", "content": "And again"},
        ]
        expect(chat.page.locator(".message.error")).to_have_count(0)


def test_stop_aborts_the_generation(serve: Callable[..., Any], open_page: Callable[[str], ChatPage]) -> None:
    # one sequence of the whole context: with no token limit the generation runs for many seconds
    with serve(n_ctx=8192, n_seq_max=1) as base_url:
        chat = open_page(base_url)
        expect(chat.page.locator("#model option")).to_have_text(["tiny"])
        chat.page.get_by_label("Max tokens").fill("")  # none: up to the end of the context
        chat.send("Tell me everything")

        expect(chat.assistant()).not_to_be_empty()
        expect(chat.page.get_by_role("button", name="Stop")).to_be_enabled()
        assert metric(base_url, "requests_processing") == 1
        # dispatched, not clicked at its position: Playwright's click waits for the button to be "stable", and
        # on a loaded machine the streaming text keeps the layout moving past the timeout
        chat.page.get_by_role("button", name="Stop").dispatch_event("click")

        chat.expect_idle()
        expect(chat.page.locator(".message.assistant .note")).to_have_text("(stopped)")
        wait_until(lambda: metric(base_url, "requests_processing") == 0, "the server cancels the generation",
                   timeout=WAIT_MS / 1000)
        stopped = chat.assistant().text_content()
        assert "max_tokens" not in chat.chat_bodies[0]
        chat.page.wait_for_timeout(300)
        assert chat.assistant().text_content() == stopped  # nothing more arrives


def test_api_key_from_the_field(serve: Callable[..., Any], open_page: Callable[[str], ChatPage]) -> None:
    with serve(api_keys=["sesame"]) as base_url:
        chat = open_page(base_url)
        expect(chat.page.get_by_role("status")).to_contain_text("API key")
        expect(chat.page.locator("#model option")).to_have_count(0)

        chat.page.get_by_label("API key").fill("sesame")
        chat.page.get_by_label("API key").press("Tab")  # 'change': the page keeps the key and lists the models
        expect(chat.page.locator("#model option")).to_have_text(["tiny"])
        chat.page.get_by_label("Max tokens").fill("16")
        chat.send("Hi")
        expect(chat.assistant()).not_to_be_empty()
        chat.expect_idle()

        chat.page.reload()  # the key was kept (localStorage)
        expect(chat.page.get_by_label("API key")).to_have_value("sesame")
        expect(chat.page.locator("#model option")).to_have_text(["tiny"])


def test_errors_are_shown(serve: Callable[..., Any], open_page: Callable[[str], ChatPage]) -> None:
    with serve(api_keys=["sesame"]) as base_url:
        chat = open_page(base_url)
        chat.page.get_by_label("API key").fill("wrong")
        chat.send("Hi")
        expect(chat.page.locator(".message.error")).to_contain_text("invalid or missing API key")
        chat.expect_idle()
        # nothing came back: the turn is taken back and its text is in the message box again
        expect(chat.page.locator(".message.user")).to_have_count(0)
        expect(chat.page.get_by_label("Message")).to_have_value("Hi")


def test_stream_parser_joins_split_reads(serve: Callable[..., Any], open_page: Callable[[str], ChatPage]) -> None:
    """The page's SSE reader, fed one byte per read: lines, events and UTF-8 characters split anywhere."""
    with serve() as base_url:
        chat = open_page(base_url)
        payloads = chat.page.evaluate("""async () => {
            const text = 'data: {"a": "é😀"}\\n\\ndata: {"b": 1}\\r\\n\\r\\n: a comment\\n\\n'
                       + 'data: [DONE]\\n\\ndata: {"after": "done"}\\n\\n';
            const bytes = new TextEncoder().encode(text);
            const body = new ReadableStream({ start(c) { for (const b of bytes) c.enqueue(new Uint8Array([b])); c.close(); } });
            const out = [];
            for await (const payload of sseData(body)) out.push(payload);
            return out;
        }""")
        assert payloads == [{"a": "é😀"}, {"b": 1}]


def test_the_api_page_renders_offline(serve: Callable[..., Any], chromium: Browser) -> None:
    """``/docs`` draws every route and schema from ``openapi.json`` with nothing but its own server: every
    other host is cut off, as on a machine with no network."""
    with serve() as base_url:
        context = chromium.new_context()
        try:
            page = context.new_page()
            requests: list[str] = []
            errors: list[str] = []
            page.on("request", lambda request: requests.append(request.url))
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base_url + "/")
                       else route.abort())
            page.goto(base_url + "/docs")
            expect(page.locator("#api h2")).to_have_text(["Routes", "Schemas"])
            expect(page.locator("#api").get_by_text("/v1/chat/completions", exact=True).first).to_be_visible()
            messages = page.locator("#api details", has_text="/v1/messages").first  # a stream of named events
            messages.locator("summary").click()
            expect(messages).to_contain_text("named events: message_start MessageStart")
            expect(page.locator("#api details[id^='schema-']").first).to_be_attached()  # the schemas, collapsed
            assert [url for url in requests if not url.startswith(base_url + "/")] == []
            assert requests[:2] == [f"{base_url}/docs", f"{base_url}/openapi.json"] and not errors
        finally:
            context.close()
