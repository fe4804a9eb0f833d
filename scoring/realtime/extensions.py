"""The ASGI extensions the web server (``tarsy_scoring.server``) offers the WebSocket consumers:
the contract between the two, here so that the application depends on a name, not on the
server's module (nor its imports)."""

# In a WebSocket's scope["extensions"]: by it the application sends a text message at once,
# without the ASGI send's message dict and framing per connection:
# {"write_text": write_text(text: str) -> bool}; False when the connection is closing.
WRITE_TEXT_EXTENSION = "tarsy.websocket.write_text"
