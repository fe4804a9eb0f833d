"""Where the Content-Security-Policy (``CONTENT_SECURITY_POLICY`` in settings) is relaxed.

Pages built from third-party templates and bundles set inline styles as they
render: Swagger UI, Redoc (which also parses the schema in a Web Worker made
from a ``blob:`` URL), and DRF's browsable API. They may;
their scripts still come only from this site.
"""

from csp.decorators import csp_replace
from rest_framework import renderers

THIRD_PARTY_PAGE_CSP = {
    "style-src": ["'self'", "'unsafe-inline'"],
    "style-src-attr": ["'unsafe-inline'"],
    "worker-src": ["'self'", "blob:"],
}
third_party_page = csp_replace(THIRD_PARTY_PAGE_CSP)


class BrowsableAPIRenderer(renderers.BrowsableAPIRenderer):
    """DRF's HTML view of the API, under the relaxed policy."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        renderer_context["response"]._csp_replace = THIRD_PARTY_PAGE_CSP  # read by django-csp's middleware
        return super().render(data, accepted_media_type, renderer_context)
