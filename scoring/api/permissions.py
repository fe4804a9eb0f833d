"""Who may do what through the API, beyond being signed in."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from scoring import services


class SessionWriteAllowed(BasePermission):
    """Reading sessions is for anyone signed in; storing them is for TARSy
    (``services.can_write_sessions``)."""

    message = f"Storing sessions is for TARSy: it needs {services.SESSION_WRITERS_RULE}."

    def has_permission(self, request, view) -> bool:
        return request.method in SAFE_METHODS or services.can_write_sessions(request.user)
