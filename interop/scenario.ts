// The interoperability scenario with a TypeScript client: types from openapi-typescript
// (out/schema.d.ts, generated from openapi.yaml by scripts/interop.sh), calls through
// openapi-fetch, type-checked by tsc --strict before it runs.
//
//   node out/js/scenario.js BASE_URL   (VOLCANO_ANON_KEY and VOLCANO_SERVICE_KEY set)
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import createClient from "openapi-fetch";
import type { paths } from "./out/schema.js";

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
console.log(`  ts: scenario passed on ${key}`);
