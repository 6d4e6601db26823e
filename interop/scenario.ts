// The interoperability scenario with a TypeScript client: types from openapi-typescript
// (out/schema.d.ts, generated from openapi.yaml by scripts/interop.sh), calls through
// openapi-fetch, type-checked by tsc --strict before it runs.
//
//   node out/js/scenario.js BASE_URL   (VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY set)
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { components, paths } from "./out/schema.js";

const [baseUrl] = process.argv.slice(2);
const anonKey = process.env.VOLCANO_ANON_KEY;
const serviceKey = process.env.VOLCANO_SERVICE_KEY;
if (!baseUrl || !anonKey || !serviceKey) {
  console.error("usage: node scenario.js BASE_URL, with VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY set");
  process.exit(2);
}

// The generated client ignores security schemes: the two credential headers go on every call.
const client = createClient<paths>({
  baseUrl,
  headers: { apikey: anonKey, Authorization: `Bearer ${serviceKey}` },
});
const key = `interop-ts-${randomUUID().slice(0, 8)}`;
const path = { key };

function step(name: string): void {
  console.log(`  ts: ${name}`);
}

step("acquire");
const first = await client.POST("/v1/locks/{key}/acquire", {
  params: { path },
  body: { owner_token: randomUUID(), ttl_seconds: 30 },
});
assert.equal(first.response.status, 200);
assert.ok(first.data);
const lease = first.data;
assert.equal(lease.key, key);
assert.equal(lease.ttl_seconds, 30);

step("get");
const state = await client.GET("/v1/locks/{key}", { params: { path } });
assert.equal(state.response.status, 200);
assert.deepEqual(
  { held: state.data?.held, fencing_token: state.data?.fencing_token },
  { held: true, fencing_token: lease.fencing_token },
);

step("renew");
const renewed = await client.POST("/v1/locks/{key}/renew", {
  params: { path },
  body: { owner_token: lease.owner_token, fencing_token: lease.fencing_token, ttl_seconds: 60 },
});
assert.equal(renewed.response.status, 200);
assert.equal(renewed.data?.fencing_token, lease.fencing_token);
assert.equal(renewed.data?.ttl_seconds, 60);

step("conflict with Retry-After");
const conflict = await client.POST("/v1/locks/{key}/acquire", {
  params: { path },
  body: { owner_token: randomUUID(), ttl_seconds: 30 },
});
assert.equal(conflict.response.status, 409);
assert.equal(conflict.error?.error.code, "lock_held");
assert.ok(Number(conflict.response.headers.get("Retry-After")) >= 1);

step("release");
const released = await client.POST("/v1/locks/{key}/release", {
  params: { path },
  body: { owner_token: lease.owner_token, fencing_token: lease.fencing_token },
});
assert.equal(released.response.status, 204);

step("force release");
const taken = await client.POST("/v1/locks/{key}/acquire", {
  params: { path },
  body: { owner_token: randomUUID(), ttl_seconds: 30 },
});
assert.equal(taken.response.status, 200);
assert.ok(taken.data && taken.data.fencing_token > lease.fencing_token);
const forced = await client.DELETE("/v1/locks/{key}", { params: { path } });
assert.equal(forced.response.status, 200);
assert.deepEqual(
  { released: forced.data?.released, fencing_token: forced.data?.fencing_token },
  { released: true, fencing_token: taken.data.fencing_token },
);

step("replay with an upper-case caller-supplied token and request id");
const token = randomUUID().toUpperCase();
const requestId = randomUUID().toUpperCase();
const acquire = () =>
  client.POST("/v1/locks/{key}/acquire", {
    params: { path, header: { "X-Request-Id": requestId } },
    body: { owner_token: token, ttl_seconds: 30 },
  });
const original = await acquire();
const replay = await acquire();
for (const answer of [original, replay]) {
  assert.equal(answer.response.status, 200);
  assert.equal(answer.data?.owner_token, token);
  assert.equal(answer.response.headers.get("X-Request-Id"), requestId);
}
assert.equal(original.response.headers.get("Idempotent-Replayed"), null);
assert.equal(replay.response.headers.get("Idempotent-Replayed"), "true");
assert.deepEqual(replay.data, original.data);
const cleanup = await client.POST("/v1/locks/{key}/release", {
  params: { path },
  body: { owner_token: token, fencing_token: original.data!.fencing_token },
});
assert.equal(cleanup.response.status, 204);

// ---- Semaphores, labels, the fence check, watching, listing and renewing many leases ----
// (CONTRACT.md "Semaphores", "Watching", "Listing and renewing many leases"; openapi.yaml.)

type State = components["schemas"]["LockState"];
type Lease = components["schemas"]["LockLease"];

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function getState(k: string): Promise<State> {
  const answer = await client.GET("/v1/locks/{key}", { params: { path: { key: k } } });
  assert.equal(answer.response.status, 200);
  assert.ok(answer.data);
  return answer.data;
}

async function take(k: string, limit: number, label?: string): Promise<Lease> {
  const answer = await client.POST("/v1/locks/{key}/acquire", {
    params: { path: { key: k } },
    body: { owner_token: randomUUID(), ttl_seconds: 30, limit, ...(label ? { label } : {}) },
  });
  assert.equal(answer.response.status, 200, JSON.stringify(answer.error));
  assert.ok(answer.data);
  return answer.data;
}

async function check(k: string, fencingToken: number) {
  const answer = await client.GET("/v1/locks/{key}/leases/{fencing_token}", {
    params: { path: { key: k, fencing_token: fencingToken } },
  });
  assert.equal(answer.response.status, 200);
  assert.ok(answer.data);
  assert.equal(answer.data.key, k);
  assert.equal(answer.data.fencing_token, fencingToken);
  return answer.data;
}

step("a key never acquired: version 0, no token, no holders, limit 1");
const fresh = await getState(`${key}-fresh`);
assert.deepEqual(
  [fresh.held, fresh.expires_at, fresh.fencing_token, fresh.limit, fresh.holders, fresh.waiters, fresh.version],
  [false, null, null, 1, [], 0, 0],
);

step("semaphore: two holders of a limit-2 key, their labels in holders");
const sem = `${key}-sem`;
const labelA = "worker-a.example.internal:8080";
const a = await take(sem, 2, labelA);
const b = await take(sem, 2);
assert.ok(b.fencing_token > a.fencing_token);
const semState = await getState(sem);
assert.equal(semState.held, true);
assert.equal(semState.limit, 2);
assert.equal(semState.waiters, 0);
assert.equal(semState.fencing_token, b.fencing_token);
assert.ok(semState.version >= 2);
assert.deepEqual(
  semState.holders.map((h) => [h.fencing_token, h.label]).sort(),
  [[a.fencing_token, labelA], [b.fencing_token, null]],
);

step("the semaphore's holders a page at a time (limit 1), following next to the end");
const page1 = await client.GET("/v1/locks/{key}/holders", {
  params: { path: { key: sem }, query: { limit: 1 } },
});
assert.equal(page1.response.status, 200);
assert.deepEqual(
  [page1.data?.holders.map((h) => [h.fencing_token, h.label, h.mode]), page1.data?.next],
  [[[a.fencing_token, labelA, "exclusive"]], a.fencing_token],
);
const page2 = await client.GET("/v1/locks/{key}/holders", {
  params: { path: { key: sem }, query: { after: page1.data?.next ?? 0, limit: 1 } },
});
assert.equal(page2.response.status, 200);
assert.deepEqual(
  [page2.data?.holders.map((h) => [h.fencing_token, h.label, h.mode]), page2.data?.next],
  [[[b.fencing_token, null, "exclusive"]], null],
);

step("a third holder refused with lock_held and Retry-After");
const third = await client.POST("/v1/locks/{key}/acquire", {
  params: { path: { key: sem } },
  body: { owner_token: randomUUID(), ttl_seconds: 30, limit: 2 },
});
assert.equal(third.response.status, 409);
assert.equal(third.error?.error.code, "lock_held");
assert.equal(third.error?.error.limit, undefined);
assert.ok(Number(third.response.headers.get("Retry-After")) >= 1);

step("another limit: 409 limit_mismatch carrying the key's limit");
const mismatch = await client.POST("/v1/locks/{key}/acquire", {
  params: { path: { key: sem } },
  body: { owner_token: randomUUID(), ttl_seconds: 30, limit: 3 },
});
assert.equal(mismatch.response.status, 409);
assert.equal(mismatch.error?.error.code, "limit_mismatch");
assert.equal(mismatch.error?.error.limit, 2);

step("fence check: a live token, a token never issued");
const liveA = await check(sem, a.fencing_token);
assert.equal(liveA.live, true);
assert.ok(liveA.expires_at !== null && Date.parse(liveA.expires_at) > 0);
const never = await check(sem, b.fencing_token + 1000);
assert.deepEqual([never.live, never.expires_at], [false, null]);

step("watch: a long poll from the current version answers when a renew changes a label");
const unchanged = await client.GET("/v1/locks/{key}", {
  params: { path: { key: sem }, query: { after_version: semState.version, wait_seconds: 0.2 } },
});
assert.equal(unchanged.response.status, 200);
assert.equal(unchanged.data?.version, semState.version); // nothing changed: the wait ran out
const labelB = "worker-b.example.internal:9090";
const watch = async (after: number): Promise<State> => {
  // Chain polls from the last version seen (the server may end one sooner than asked).
  for (let polls = 0; polls < 20; polls++) {
    const answer = await client.GET("/v1/locks/{key}", {
      params: { path: { key: sem }, query: { after_version: after, wait_seconds: 30 } },
    });
    assert.equal(answer.response.status, 200);
    assert.ok(answer.data);
    if (answer.data.version !== after) return answer.data;
  }
  throw new Error(`no change of ${sem} after version ${after}`);
};
const watching = watch(semState.version); // a second request, open while the renew runs
// Give the poll a moment to be open before the change (either order must be answered with the
// new version; this makes the waiting path the usual one).
await sleep(250);
const relabelled = await client.POST("/v1/locks/{key}/renew", {
  params: { path: { key: sem } },
  body: { owner_token: b.owner_token, fencing_token: b.fencing_token, ttl_seconds: 30, label: labelB },
});
assert.equal(relabelled.response.status, 200);
const changed = await watching;
assert.ok(changed.version > semState.version);
assert.deepEqual(
  changed.holders.map((h) => [h.fencing_token, h.label]).sort(),
  [[a.fencing_token, labelA], [b.fencing_token, labelB]],
);

step("a waiter in line: waiters 1, version unchanged");
const waiterToken = randomUUID();
const wait = async (): Promise<Lease> => {
  // Waiting acquires, each rejoining its place in line (the server ends a wait after a second
  // here: interop.sh runs it with --max-wait 1), until a slot is granted.
  for (let tries = 0; tries < 60; tries++) {
    const answer = await client.POST("/v1/locks/{key}/acquire", {
      params: { path: { key: sem } },
      body: { owner_token: waiterToken, ttl_seconds: 30, limit: 2, label: "waiter", wait_seconds: 10 },
    });
    if (answer.data) return answer.data;
    assert.equal(answer.response.status, 409);
    assert.equal(answer.error?.error.code, "lock_held");
  }
  throw new Error(`waiting for ${sem}: no slot granted`);
};
const waiting = wait();
let queued = await getState(sem);
for (let polls = 0; queued.waiters !== 1; polls++) {
  assert.ok(polls < 200, `${sem}: the waiter never showed in waiters`);
  await sleep(50);
  queued = await getState(sem);
}
assert.deepEqual(
  [queued.version, queued.holders, queued.limit],
  [changed.version, changed.holders, 2],
);

step("release hands the slot to the waiter; the fence check says the released one is not live");
const releasedA = await client.POST("/v1/locks/{key}/release", {
  params: { path: { key: sem } },
  body: { owner_token: a.owner_token, fencing_token: a.fencing_token },
});
assert.equal(releasedA.response.status, 204);
const w = await waiting;
const endedA = await check(sem, a.fencing_token);
assert.deepEqual([endedA.live, endedA.expires_at], [false, null]);
assert.equal((await check(sem, w.fencing_token)).live, true);
const handedOff = await getState(sem);
assert.deepEqual(
  handedOff.holders.map((h) => [h.fencing_token, h.label]).sort(),
  [[b.fencing_token, labelB], [w.fencing_token, "waiter"]],
);
assert.equal(handedOff.waiters, 0);

step("listing a unique prefix one key a page, following next until null");
const prefix = `${key}-list-`;
const listed: Lease[] = [];
for (const suffix of ["c", "a", "b"]) listed.push(await take(`${prefix}${suffix}`, 1, "lister"));
const seen: string[] = [];
let after: string | undefined;
let pages = 0;
for (;;) {
  const page = await client.GET("/v1/locks", { params: { query: { prefix, after, limit: 1 } } });
  assert.equal(page.response.status, 200);
  assert.ok(page.data);
  assert.ok(page.data.locks.length <= 1);
  for (const state of page.data.locks) {
    assert.equal(state.held, true);
    assert.deepEqual(state.holders.map((h) => h.label), ["lister"]);
    seen.push(state.key);
  }
  pages += 1;
  assert.ok(pages <= 10, "listing did not end");
  if (page.data.next === null) break;
  after = page.data.next;
}
assert.deepEqual(seen, [`${prefix}a`, `${prefix}b`, `${prefix}c`]);
assert.ok(pages >= 3);

step("renewing many leases at once: one refused, the others renewed; replayed by request id");
const [l0, l1] = [listed[0]!, listed[1]!];
const batchRequestId = randomUUID().toUpperCase();
const renewMany = () => client.POST("/v1/leases/renew", {
  params: { header: { "X-Request-Id": batchRequestId } },
  body: {
    leases: [
      { key: l0.key, owner_token: l0.owner_token, fencing_token: l0.fencing_token, ttl_seconds: 45 },
      { key: sem, owner_token: a.owner_token, fencing_token: a.fencing_token, ttl_seconds: 45 },
      { key: sem, owner_token: b.owner_token, fencing_token: b.fencing_token, ttl_seconds: 45 },
      { key: l1.key, owner_token: l1.owner_token, fencing_token: l1.fencing_token, ttl_seconds: 45, label: "relabelled" },
    ],
  },
});
const batch = await renewMany();
assert.equal(batch.response.status, 200);
assert.ok(batch.data);
const results = batch.data.results;
assert.deepEqual(results.map((r) => r.key), [l0.key, sem, sem, l1.key]);
// LeaseRenewalResult is `LeaseRenewed | LeaseRefused`, a oneOf with no discriminator, and both
// carry openapi-typescript's `[key: string]: unknown` (additionalProperties: true). So `"lease" in
// r` narrows the false branch to LeaseRefused but leaves LeaseRefused in the true one, where
// `r.lease` is `unknown` (TS18046): the generated types cannot tell a renewed entry by
// themselves; a hand-written type guard has to.
type Renewed = components["schemas"]["LeaseRenewed"];
const isRenewed = (r: components["schemas"]["LeaseRenewalResult"]): r is Renewed => "lease" in r;
const outcome = results.map((r) =>
  isRenewed(r) ? `renewed ${r.lease.fencing_token} ${r.lease.ttl_seconds}` : `${r.status} ${r.error.code}`,
);
assert.deepEqual(outcome, [
  `renewed ${l0.fencing_token} 45`,
  "409 lease_not_held",
  `renewed ${b.fencing_token} 45`,
  `renewed ${l1.fencing_token} 45`,
]);
assert.deepEqual((await getState(l1.key)).holders.map((h) => h.label), ["relabelled"]);
const batchReplay = await renewMany();
assert.equal(batchReplay.response.status, 200);
assert.equal(batchReplay.response.headers.get("Idempotent-Replayed"), "true");
assert.equal(batchReplay.response.headers.get("X-Request-Id"), batchRequestId);
assert.deepEqual(batchReplay.data, batch.data);

// ---- Shared locks (CONTRACT.md "Shared locks and groups"; openapi.yaml) ----

const shared = `${key}-shared`;
const acquireShared = (owner: string, extra: { limit?: number } = {}) =>
  client.POST("/v1/locks/{key}/acquire", {
    params: { path: { key: shared } },
    body: { owner_token: owner, ttl_seconds: 30, shared: true, ...extra },
  });

step("shared: two shared holders, each holder's mode in holders; a writer refused with lock_held");
const r1 = (await acquireShared(randomUUID())).data!;
const r2 = (await acquireShared(randomUUID())).data!;
assert.ok(r1 && r2 && r2.fencing_token > r1.fencing_token);
const readers = await getState(shared);
assert.deepEqual(
  readers.holders.map((h) => [h.fencing_token, h.mode]),
  [[r1.fencing_token, "shared"], [r2.fencing_token, "shared"]],
);
const refusedWriter = await client.POST("/v1/locks/{key}/acquire", {
  params: { path: { key: shared } },
  body: { owner_token: randomUUID(), ttl_seconds: 30 },
});
assert.equal(refusedWriter.response.status, 409);
assert.equal(refusedWriter.error?.error.code, "lock_held");

step("mode_mismatch for the same owner in the other mode; shared_with_limit three ways");
const modeChange = await client.POST("/v1/locks/{key}/acquire", {
  params: { path: { key: shared } },
  body: { owner_token: r1.owner_token, ttl_seconds: 30, shared: false },
});
assert.equal(modeChange.response.status, 409);
assert.equal(modeChange.error?.error.code, "mode_mismatch");
const both = await acquireShared(randomUUID(), { limit: 2 });
assert.equal(both.response.status, 409);
assert.equal(both.error?.error.code, "shared_with_limit");
const onSemaphore = await client.POST("/v1/locks/{key}/acquire", {
  params: { path: { key: sem } },
  body: { owner_token: randomUUID(), ttl_seconds: 30, shared: true },
});
assert.equal(onSemaphore.response.status, 409);
assert.equal(onSemaphore.error?.error.code, "shared_with_limit");

step("a writer in line is not passed by a later reader; the last reader's release hands it the key");
const writerToken = randomUUID();
const waitToWrite = async (): Promise<Lease> => {
  for (let tries = 0; tries < 60; tries++) {
    const answer = await client.POST("/v1/locks/{key}/acquire", {
      params: { path: { key: shared } },
      body: { owner_token: writerToken, ttl_seconds: 30, wait_seconds: 10 },
    });
    if (answer.data) return answer.data;
    assert.equal(answer.error?.error.code, "lock_held");
  }
  throw new Error(`waiting to write ${shared}: never granted`);
};
const writing = waitToWrite();
for (let polls = 0; (await getState(shared)).waiters !== 1; polls++) {
  assert.ok(polls < 200, `${shared}: the writer never showed in waiters`);
  await sleep(50);
}
const lateReader = await acquireShared(randomUUID());
assert.equal(lateReader.response.status, 409);
assert.equal(lateReader.error?.error.code, "lock_held");
for (const reader of [r1, r2]) {
  const done = await client.POST("/v1/locks/{key}/release", {
    params: { path: { key: shared } },
    body: { owner_token: reader.owner_token, fencing_token: reader.fencing_token },
  });
  assert.equal(done.response.status, 204);
}
const written = await writing;
assert.ok(written.fencing_token > r2.fencing_token);
assert.deepEqual(
  (await getState(shared)).holders.map((h) => [h.fencing_token, h.mode]),
  [[written.fencing_token, "exclusive"]],
);
const endShared = await client.DELETE("/v1/locks/{key}", { params: { path: { key: shared } } });
assert.deepEqual([endShared.data?.released_count, endShared.data?.fencing_token], [1, written.fencing_token]);

step("force release of a semaphore and the listed keys; nothing of this run is left listed");
// The semaphore has b and the waiter's lease: two removed, the highest token named.
const held: [string, number, number][] = [[sem, 2, w.fencing_token]];
for (const l of listed) held.push([l.key, 1, l.fencing_token]);
for (const [k, count, token] of held) {
  const forcedAll = await client.DELETE("/v1/locks/{key}", { params: { path: { key: k } } });
  assert.equal(forcedAll.response.status, 200);
  assert.deepEqual(
    [forcedAll.data?.released, forcedAll.data?.released_count, forcedAll.data?.fencing_token],
    [true, count, token],
  );
}
const empty = await client.GET("/v1/locks", { params: { query: { prefix: key } } });
assert.equal(empty.response.status, 200);
assert.deepEqual([empty.data?.locks, empty.data?.next], [[], null]);
// Groups: every group operation, through the generated types.
step("groups: create; again is group_exists");
const group = `${key}-group`;
const groupPath = { group };
const created = await client.PUT("/v1/groups/{group}", { params: { path: groupPath } });
assert.equal(created.response.status, 201);
assert.deepEqual(created.data, { group, version: 1, fencing_token: null, members: 0 });
const createdAgain = await client.PUT("/v1/groups/{group}", { params: { path: groupPath } });
assert.equal(createdAgain.response.status, 409);
assert.equal(createdAgain.error?.error.code, "group_exists");

step("join with JSON and with bytes capabilities; another owner is member_exists");
type Capabilities = components["schemas"]["Capabilities"];
const join = (member: string, capabilities?: Capabilities) =>
  client.POST("/v1/groups/{group}/members/{member}/join", {
    params: { path: { group, member } },
    body: { owner_token: randomUUID(), ttl_seconds: 30, ...(capabilities ? { capabilities } : {}) },
  });
const memberBytes = Buffer.from([0, 1, 255]).toString("base64");
const joined1 = await join("m1", { json: { port: 8080 } });
const joined2 = await join("m2", { base64: memberBytes });
assert.equal(joined1.response.status, 200);
assert.equal(joined2.response.status, 200);
assert.ok(joined1.data && joined2.data);
const [one, two] = [joined1.data, joined2.data];
assert.ok(two.fencing_token > one.fencing_token);
const memberTaken = await join("m1");
assert.equal(memberTaken.response.status, 409);
assert.equal(memberTaken.error?.error.code, "member_exists");
assert.ok(Number(memberTaken.response.headers.get("Retry-After")) >= 1);

step("members a page at a time, with their capabilities; one member alone");
const members: components["schemas"]["GroupMember"][] = [];
let afterMember: string | undefined;
for (let pages = 0; ; pages += 1) {
  assert.ok(pages < 5, "members listing did not end");
  const page = await client.GET("/v1/groups/{group}/members", {
    params: { path: groupPath, query: { after: afterMember, limit: 1 } },
  });
  assert.equal(page.response.status, 200);
  assert.ok(page.data);
  members.push(...page.data.members);
  if (page.data.next === null) break;
  afterMember = page.data.next;
}
assert.deepEqual(
  members.map((m) => [m.member, m.capabilities]),
  [["m1", { json: { port: 8080 } }], ["m2", { base64: memberBytes }]],
);
const alone = await client.GET("/v1/groups/{group}/members/{member}", {
  params: { path: { group, member: "m2" } },
});
assert.deepEqual(alone.data?.capabilities, { base64: memberBytes });

step("watch: a group's long poll answers when a member leaves");
const groupVersion = (await client.GET("/v1/groups/{group}", { params: { path: groupPath } })).data?.version;
assert.ok(groupVersion !== undefined);
const groupWatch = client.GET("/v1/groups/{group}", {
  params: { path: groupPath, query: { after_version: groupVersion, wait_seconds: 30 } },
});
await new Promise((resolve) => setTimeout(resolve, 250)); // the poll open first, usually
const left = await client.POST("/v1/groups/{group}/members/{member}/leave", {
  params: { path: { group, member: "m2" } },
  body: { owner_token: two.owner_token, fencing_token: two.fencing_token },
});
assert.equal(left.response.status, 204);
const watched = await groupWatch;
assert.equal(watched.response.status, 200);
assert.ok(watched.data && watched.data.version > groupVersion);
assert.equal(watched.data.members, 1);

step("renew a membership, change its capabilities");
const m1Path = { path: { group, member: "m1" } };
const renewedMembership = await client.POST("/v1/groups/{group}/members/{member}/renew", {
  params: m1Path,
  body: { owner_token: one.owner_token, fencing_token: one.fencing_token, ttl_seconds: 60 },
});
assert.deepEqual(
  [renewedMembership.data?.fencing_token, renewedMembership.data?.ttl_seconds],
  [one.fencing_token, 60],
);
const updated = await client.POST("/v1/groups/{group}/members/{member}/capabilities", {
  params: m1Path,
  body: { owner_token: one.owner_token, fencing_token: one.fencing_token, capabilities: { json: { port: 9090 } } },
});
assert.equal(updated.response.status, 200);
const readBack = await client.GET("/v1/groups/{group}/members/{member}", { params: m1Path });
assert.deepEqual(readBack.data?.capabilities, { json: { port: 9090 } });

step("renew memberships at once: one refused (it left); replayed by request id");
const membershipsRequestId = randomUUID().toUpperCase();
const renewMemberships = () => client.POST("/v1/members/renew", {
  params: { header: { "X-Request-Id": membershipsRequestId } },
  body: {
    memberships: [one, two].map((m) => ({
      group: m.group, member: m.member, owner_token: m.owner_token, fencing_token: m.fencing_token, ttl_seconds: 45,
    })),
  },
});
const membershipBatch = await renewMemberships();
assert.equal(membershipBatch.response.status, 200);
assert.ok(membershipBatch.data);
// As with LeaseRenewalResult: a oneOf without a discriminator, told apart by a type guard.
type MembershipRenewed = components["schemas"]["MembershipRenewed"];
const isMembershipRenewed = (
  r: components["schemas"]["MembershipRenewalResult"],
): r is MembershipRenewed => "membership" in r;
assert.deepEqual(
  membershipBatch.data.results.map((r) =>
    isMembershipRenewed(r) ? `renewed ${r.membership.ttl_seconds}` : `${r.status} ${r.error.code}`,
  ),
  ["renewed 45", "409 lease_not_held"],
);
const membershipReplay = await renewMemberships();
assert.equal(membershipReplay.response.headers.get("Idempotent-Replayed"), "true");
assert.deepEqual(membershipReplay.data, membershipBatch.data);

step("group_not_empty; a member removed without its token; deleted; group_not_found");
const notEmpty = await client.DELETE("/v1/groups/{group}", { params: { path: groupPath } });
assert.equal(notEmpty.response.status, 409);
assert.equal(notEmpty.error?.error.code, "group_not_empty");
const removal = await client.DELETE("/v1/groups/{group}/members/{member}", { params: m1Path });
assert.deepEqual([removal.data?.removed, removal.data?.fencing_token], [true, one.fencing_token]);
const deletedGroup = await client.DELETE("/v1/groups/{group}", { params: { path: groupPath } });
assert.equal(deletedGroup.response.status, 204);
const goneGroup = await client.GET("/v1/groups/{group}", { params: { path: groupPath } });
assert.equal(goneGroup.response.status, 404);
assert.equal(goneGroup.error?.error.code, "group_not_found");

step("groups listed a page at a time, then deleted");
const groupPrefix = `${group}-list-`;
for (const suffix of ["b", "a"]) {
  const made = await client.PUT("/v1/groups/{group}", { params: { path: { group: `${groupPrefix}${suffix}` } } });
  assert.equal(made.response.status, 201);
}
const groupNames: string[] = [];
let afterGroup: string | undefined;
for (let pages = 0; ; pages += 1) {
  assert.ok(pages < 5, "groups listing did not end");
  const page = await client.GET("/v1/groups", {
    params: { query: { prefix: groupPrefix, after: afterGroup, limit: 1 } },
  });
  assert.equal(page.response.status, 200);
  assert.ok(page.data);
  groupNames.push(...page.data.groups.map((g) => g.group));
  if (page.data.next === null) break;
  afterGroup = page.data.next;
}
assert.deepEqual(groupNames, [`${groupPrefix}a`, `${groupPrefix}b`]);
for (const name of groupNames) {
  const gone = await client.DELETE("/v1/groups/{group}", { params: { path: { group: name } } });
  assert.equal(gone.response.status, 204);
}
console.log(`  ts: scenario passed on ${key}`);
