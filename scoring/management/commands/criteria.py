import getpass

from django.core.management.base import BaseCommand, CommandError

from scoring import identities
from scoring.criteria import corrections, selectors, services
from scoring.models import CriteriaVersion


class Command(BaseCommand):
    help = (
        "Judge criteria versions (docs/criteria.md): list them, create a draft from text files, "
        "make it a candidate, promote it, roll a scope back, retire a draft or candidate, build a "
        "calibrated candidate from reviewers' corrections."
    )

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        listing = actions.add_parser("list", help="every version: id, state, scope, hash")
        listing.add_argument("--state", help="only versions in this state")
        show = actions.add_parser("show", help="a version's texts and recorded changes")
        show.add_argument("version", type=int)
        create = actions.add_parser(
            "create", help="a draft from text files (UTF-8; one final newline dropped)"
        )
        create.add_argument(
            "--score-file", required=True, help="the turn-1 score prompt, with its placeholders"
        )
        create.add_argument("--followup-file", required=True, help="the turn-2 follow-up prompt")
        create.add_argument("--system-file", help="a system prompt (optional)")
        create.add_argument(
            "--scope", default="global", help="global (default), alert_type:NAME or chain:NAME"
        )
        create.add_argument("--description", default="", help="what these criteria change, and why")
        create.add_argument("--candidate", action="store_true", help="make it a candidate at once")
        calibrate = actions.add_parser(
            "calibrate",
            help="a candidate of a version's texts with reviewers' corrections as worked examples",
        )
        calibrate.add_argument("version", type=int, help="the base version")
        calibrate.add_argument(
            "--size",
            type=int,
            default=corrections.DEFAULT_EXAMPLES,
            help=f"examples at most, 1 to {corrections.MAX_EXAMPLES} "
            f"(default {corrections.DEFAULT_EXAMPLES})",
        )
        calibrate.add_argument("--description", default="", help="said after what calibration says of it")
        moves = []
        for name, helped in (
            ("candidate", "freeze a draft's texts: a candidate"),
            ("promote", "make a candidate the current version of its scope"),
            ("retire", "set a draft or candidate aside"),
        ):
            moved = actions.add_parser(name, help=helped)
            moved.add_argument("version", type=int)
            moved.add_argument("--reason", default="", help="why (promote needs one)")
            moves.append(moved)
        rollback = actions.add_parser(
            "rollback", help="give a scope back the version its current one replaced"
        )
        rollback.add_argument("--scope", required=True, help="global, alert_type:NAME or chain:NAME")
        rollback.add_argument("--reason", required=True, help="why")
        for writer in (create, rollback, calibrate, *moves):
            writer.add_argument("--by", default=None, help="recorded as who made the change (default: $USER)")

    def handle(self, *args, **options):
        by = options.get("by") or f"{identities.COMMAND}{getpass.getuser()}"
        action = options["action"]
        try:
            if action == "list":
                self._list(options["state"])
            elif action == "show":
                self._show(options["version"])
            elif action == "create":
                self._create(options, by)
            elif action == "calibrate":
                version = services.build_calibrated_candidate(
                    options["version"],
                    size=options["size"],
                    description=options["description"],
                    created_by=by,
                )
                self.stdout.write(
                    f"v{version.pk} {version.scope_label} is {version.state} with {len(version.examples)} "
                    f"worked examples, hash {version.prompt_hash}"
                )
            elif action == "rollback":
                scope, value = services.parse_scope(options["scope"])
                change = services.rollback(
                    scope=scope, scope_value=value, changed_by=by, reason=options["reason"]
                )
                restored = (
                    f"v{change.restored_id} is current again"
                    if change.restored_id
                    else ("its sessions fall back to the wider scope")
                )
                self.stdout.write(f"rolled back v{change.version_id}: {restored}")
            else:
                move = {
                    "candidate": services.make_candidate,
                    "promote": services.promote,
                    "retire": services.retire,
                }
                version = move[action](options["version"], changed_by=by, reason=options["reason"])
                self.stdout.write(f"v{version.pk} {version.scope_label} is {version.state}")
        except services.CriteriaError as exc:
            raise CommandError(str(exc)) from None
        except CriteriaVersion.DoesNotExist as exc:
            raise CommandError(str(exc)) from None

    def _create(self, options, by: str) -> None:
        files = {}
        for name in ("score", "followup", "system"):
            path = options[f"{name}_file"]
            if path is None:
                continue
            try:
                with open(path, "rb") as handle:
                    files[name] = handle.read()
            except OSError as exc:
                raise CommandError(f"--{name}-file {path}: {exc.strerror}") from None
        criteria = services.criteria_from_files(**files)
        scope, value = services.parse_scope(options["scope"])
        version = services.create_draft(
            criteria, scope=scope, scope_value=value, description=options["description"], created_by=by
        )
        if options["candidate"]:
            version = services.make_candidate(version.pk, changed_by=by)
        self.stdout.write(
            f"v{version.pk} {version.scope_label} is {version.state}, hash {version.prompt_hash}"
        )

    def _list(self, state: str | None) -> None:
        for version in selectors.criteria_versions(state=state):
            self.stdout.write(
                f"v{version.pk}\t{version.state}\t{version.scope_label}\t{version.prompt_hash}\t{version.description}"
            )

    def _show(self, version_id: int) -> None:
        version = CriteriaVersion.objects.filter(pk=version_id).first()
        if version is None:
            raise CommandError(f"no criteria version {version_id}")
        self.stdout.write(f"v{version.pk} {version.scope_label} {version.state}, hash {version.prompt_hash}")
        for title, text in (
            ("system prompt", version.system_prompt),
            ("score prompt", version.score_prompt),
            ("follow-up prompt", version.followup_prompt),
        ):
            self.stdout.write(f"--- {title} ---\n{text or '(none)'}")
        for number, example in enumerate(version.examples, start=1):
            self.stdout.write(
                f"--- example {number}: session {example['session_id']} ({example['alert_type']}), judge "
                f"{example['judge_score']}, reviewer {example['reviewer_score']} ---\n{example['note']}"
            )
        for change in selectors.changes_of(version):
            self.stdout.write(
                f"{change.changed_at:%Y-%m-%d %H:%M:%S} {change.action} v{change.version_id} "
                f"by {change.changed_by}: {change.reason}"
            )
