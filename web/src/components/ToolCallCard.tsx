import type { ToolCall } from '../state/types';

function pretty(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}

/** A function call the model asked for: its name and arguments. */
export function ToolCallCard({ call }: { call: ToolCall }) {
  return (
    <div class="tool-call" data-testid="tool-call">
      <div class="tool-call-head">
        <span class="tool-call-kind">Tool call</span> <code>{call.name || '(unnamed)'}</code>
      </div>
      <pre>{pretty(call.arguments)}</pre>
    </div>
  );
}
