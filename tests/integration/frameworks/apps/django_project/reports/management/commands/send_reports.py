from volcano.integrations.django import LockedCommand

from ...progress import hold_until_flag, record


class Command(LockedCommand):
    help = "Send the reports, on one machine at a time."
    lock_ttl = 3

    def add_arguments(self, parser):
        parser.add_argument("--until-lost", action="store_true")

    def handle(self, *args, **options):
        token = self.lock.lease.fencing_token
        record(f"start {token}")
        if options["until_lost"]:
            self.lock.wait_lost(timeout=30)
            self.lock.check()  # raises volcano.LockLostError: the command exits 76
        hold_until_flag()
        record(f"end {token}")
