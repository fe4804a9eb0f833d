# One image for both roles: the web server (default command) and the judge
# worker (`python manage.py scoring_worker`). See docs/deploy.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    TARSY_SCORING_VAR_DIR=/app/var

WORKDIR /app
COPY requirements/base.txt requirements/base.txt
RUN pip install -r requirements/base.txt

COPY . .
# A throwaway key only for collectstatic, so that no key is baked into the image.
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
    && useradd --system --no-create-home --uid 10001 tarsy \
    && mkdir -p /app/var && chown tarsy /app/var
USER tarsy

EXPOSE 8000
CMD ["python", "-m", "tarsy_scoring.server", "--host", "0.0.0.0", "--port", "8000"]
