"""Who may do what through the API, beyond being signed in."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from scoring import services


class SessionWriteAllowed(BasePermission):
    """Reading sessions is for anyone signed in; storing them is for TARSy
    (``services.can_write_sessions``)."""

    message = f"Storing sessions is for TARSy: it needs {services.SESSION_WRITERS_RULE}."

    def has_permission(self, request, view) -> bool:
        return request.method in SAFE_METHODS or services.can_write_sessions(request.user)


class ReviewWriteAllowed(BasePermission):
    """Reading reviews is for anyone signed in; recording one needs the admin's
    review permission (``services.can_review``)."""

    message = f"Reviewing scores needs the {services.REVIEW_PERMISSION} permission (\"add score review\")."

    def has_permission(self, request, view) -> bool:
        return request.method in SAFE_METHODS or services.can_review(request.user)


class StaffOnly(BasePermission):
    """What the service's staff alone may read (``is_staff``), as a failed score's error as
    recorded: the judge's transcripts hold the sessions' data and the judge's raw replies."""

    message = "Only the service's staff may read this."

    def has_permission(self, request, view) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.is_staff)
