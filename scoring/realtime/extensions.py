"""The ASGI extensions the web server (``tarsy_scoring.server``) offers the WebSocket consumers:
the contract between the two, here so that the application depends on a name, not on the
server's module (nor its imports)."""

# In a WebSocket's scope["extensions"]: by it the application sends a text message at once,
# without the ASGI send's message dict and framing per connection:
# {"write_text": write_text(text: str) -> bool}; False when the connection is closing.
WRITE_TEXT_EXTENSION = "tarsy.websocket.write_text"

# In a WebSocket's scope["extensions"]: by it the application answers a text message as the
# server reads it, without the ASGI receive (its queue, the application's task woken, the
# socket's reading paused and resumed): {"answer_with": answer_with(answer)}, where
# ``answer(text: str) -> bool`` is called with each whole text message that arrives while no
# earlier message waits in that queue; True: it was answered, and the application does not
# receive it.
ANSWER_AT_ONCE_EXTENSION = "tarsy.websocket.answer_at_once"
