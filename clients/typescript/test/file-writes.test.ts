/**
 * Write plans without a server (`src/file-writes.ts`): the file a call writes is confined to the
 * root, through symlinks too, and the plan carries the hashes and the diff an approver reads.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { ToolError } from "../src/errors.js";
import { FileWrites, wholeFileDiff } from "../src/file-writes.js";

function folders(): { root: string; outside: string } {
  const base = mkdtempSync(join(tmpdir(), "file-writes-"));
  const root = join(base, "root");
  const outside = join(base, "outside");
  mkdirSync(root);
  mkdirSync(outside);
  return { root, outside };
}

const sha = (text: string): string => createHash("sha256").update(text).digest("hex");

test("a plan carries the file's path under the root, both hashes and the diff", () => {
  const { root } = folders();
  writeFileSync(join(root, "notes.txt"), "old\n");
  const plan = new FileWrites(root).plan("fs", "write_file", {
    path: join(root, "notes.txt"),
    content: "new\n",
  });
  assert.deepEqual(plan, {
    workspace: "fs",
    path: "notes.txt",
    before_hash: sha("old\n"),
    after_hash: sha("new\n"),
    diff: "--- a/notes.txt\n+++ b/notes.txt\n@@ -1,1 +1,1 @@\n-old\n+new\n",
  });
});

test("a new file is planned from nothing, a relative path from the root", () => {
  const { root } = folders();
  const plan = new FileWrites(root).plan("fs", "write_file", { path: "a/b.txt", content: "x" });
  assert.equal(plan.path, "a/b.txt");
  assert.equal(plan.before_hash, sha(""));
  assert.equal(plan.diff, "--- a/a/b.txt\n+++ b/a/b.txt\n@@ -0,0 +1,1 @@\n+x\n\\ No newline at end of file\n");
});

test("a path out of the root is refused: .., an absolute path, a symlink, a dangling symlink", () => {
  const { root, outside } = folders();
  writeFileSync(join(outside, "there.txt"), "theirs");
  symlinkSync(join(outside, "there.txt"), join(root, "link.txt"));
  symlinkSync(join(outside, "not-yet.txt"), join(root, "dangling.txt"));
  symlinkSync(outside, join(root, "dir"));
  const files = new FileWrites(root);
  for (const path of [
    join(root, "..", "outside", "x.txt"),
    join(outside, "x.txt"),
    join(root, "link.txt"),
    join(root, "dangling.txt"),
    join(root, "dir", "x.txt"),
    root,
    "",
  ]) {
    assert.throws(() => files.target({ path }), ToolError, path);
  }
});

test("a link that stays inside the root is followed", () => {
  const { root } = folders();
  writeFileSync(join(root, "real.txt"), "x");
  symlinkSync(join(root, "real.txt"), join(root, "alias.txt"));
  assert.equal(new FileWrites(root).target({ path: "alias.txt" }), join(new FileWrites(root).root, "real.txt"));
});

test("an unchanged file has an empty diff", () => {
  assert.equal(wholeFileDiff("a.txt", "same\n", "same\n"), "");
});
