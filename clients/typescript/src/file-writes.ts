/**
 * Write plans for file tools whose files lie under a root (the MCP guard's `fileRoot`), as the
 * Python guard's `FileWrites`: the file a call writes, confined to the root (no `..`, no
 * symlink out of it), its hash before and after, and the change as a unified diff for the
 * approver. A write whose outcome was lost is settled by the file's hash now: already applied,
 * applied again after approval, or a conflict.
 *
 * Node only (`node:fs`, `node:crypto`): the guard imports it for a server whose files it can read.
 */

import { createHash } from "node:crypto";
import {
  existsSync,
  lstatSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  statSync,
} from "node:fs";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";

import { ToolError } from "./errors.js";
import type { Body } from "./protocol.js";

/** File-writing tools (of `@modelcontextprotocol/server-filesystem`) and the argument that holds
 * the new content. */
export const FILE_WRITE_TOOLS: Record<string, string> = { write_file: "content" };
/** The longest diff a plan carries (the ledger's limit). */
const MAX_DIFF = 200_000;

function sha256(data: Buffer | string): string {
  return createHash("sha256").update(data).digest("hex");
}

/** How many symbolic links a path may pass through (as the kernel's limit). */
const MAX_LINKS = 40;

/**
 * `path` with every symlink resolved, a dangling one too (to where it points: a write through
 * it would create that file); the part that does not exist is kept as written.
 */
function realResolved(path: string, links = 0): string {
  if (existsSync(path)) return realpathSync(path);
  if (lstatSync(path, { throwIfNoEntry: false })?.isSymbolicLink()) {
    if (links >= MAX_LINKS) {
      throw new ToolError(`${path} passes through too many links`, { code: "INVALID_TOOL_INPUT" });
    }
    return realResolved(resolve(dirname(path), readlinkSync(path)), links + 1);
  }
  const parent = dirname(path);
  return parent === path ? path : join(realResolved(parent, links), basename(path));
}

/** The lines of `text`, each with its line ending; a last line without one is marked. */
function diffLines(text: string, sign: string): string[] {
  if (text === "") return [];
  const lines = text.split(/(?<=\n)/);
  return lines.map((line) =>
    line.endsWith("\n") ? `${sign}${line}` : `${sign}${line}\n\\ No newline at end of file\n`,
  );
}

/** The change from `before` to `after` as one unified-diff hunk over the whole file. */
export function wholeFileDiff(path: string, before: string, after: string): string {
  if (before === after) return "";
  const removed = diffLines(before, "-");
  const added = diffLines(after, "+");
  const range = (count: number): string => `${count === 0 ? 0 : 1},${count}`;
  return (
    `--- a/${path}\n+++ b/${path}\n@@ -${range(removed.length)} +${range(added.length)} @@\n` +
    removed.join("") +
    added.join("")
  );
}

/** Write plans for file tools whose files lie under `root`. */
export class FileWrites {
  readonly root: string;

  constructor(
    root: string,
    readonly tools: Record<string, string> = FILE_WRITE_TOOLS,
  ) {
    this.root = realResolved(resolve(root));
  }

  /** The file a call writes, confined to the root; a refusal is a failure with no effect. */
  target(args: Body): string {
    const raw = args.path;
    if (typeof raw !== "string" || raw === "") {
      throw new ToolError("a file write needs a path", { code: "INVALID_TOOL_INPUT" });
    }
    const resolved = realResolved(isAbsolute(raw) ? resolve(raw) : resolve(this.root, raw));
    const inside = relative(this.root, resolved);
    if (inside === "" || inside.startsWith(`..${sep}`) || inside === ".." || isAbsolute(inside)) {
      throw new ToolError(`${raw} is outside the workspace root`, { code: "INVALID_TOOL_INPUT" });
    }
    return resolved;
  }

  /** The hash of the file's content now (of nothing when there is no file). */
  currentHash(target: string): string {
    return sha256(this.read(target));
  }

  /** The plan of a call of `tool` with `args`, for the server named `workspace`. */
  plan(workspace: string, tool: string, args: Body): Body {
    const field = this.tools[tool] ?? "content";
    const target = this.target(args);
    const content = args[field];
    if (typeof content !== "string") {
      throw new ToolError(`${tool} needs its ${field} as text`, { code: "INVALID_TOOL_INPUT" });
    }
    const before = this.read(target);
    const path = relative(this.root, target).split(sep).join("/");
    return {
      workspace,
      path,
      before_hash: sha256(before),
      after_hash: sha256(content),
      diff: wholeFileDiff(path, before.toString("utf8"), content).slice(0, MAX_DIFF),
    };
  }

  private read(target: string): Buffer {
    return existsSync(target) && statSync(target).isFile() ? readFileSync(target) : Buffer.alloc(0);
  }
}
