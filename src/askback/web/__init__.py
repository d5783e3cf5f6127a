"""The web pieces the products share, none of them a product of its own: the ASGI guards and headers every HTTP
surface is served behind (`asgi`), the page kit every hosted page is built with (`pages`), reading an OAuth
authorization server's metadata (`oauth_metadata`), and Standard Webhooks signatures, made by the sender and checked
by the receiver (`standard_webhooks`). Each product may import them; they import no product."""
