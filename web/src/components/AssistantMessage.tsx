import type { LiveReply } from '../state/live';
import { regenerate, working } from '../state/generate';
import type { Message } from '../state/types';
import { IconButton } from './IconButton';
import { Markdown } from './Markdown';
import { MessageStats } from './MessageStats';
import { Reasoning } from './Reasoning';
import { ToolCallCard } from './ToolCallCard';
import { copyText } from './copy';

/**
 * A reply: streaming (`live`: it alone re-renders as tokens arrive, at most once per frame) or stored. Both use
 * this one component under the message's id, so when the stream ends its rendered blocks stay as they are.
 */
export function AssistantMessage({ message: m, live, last }: { message: Message; live?: LiveReply; last: boolean }) {
  const content = live ? live.content.value : m.content;
  const reasoning = live ? live.reasoning.value : m.reasoning;
  const calls = live ? live.toolCalls.value : m.tool_calls;
  const waiting = live && !content && !reasoning && !calls?.length;
  const busy = working.value;
  return (
    <div class={`msg msg-assistant ${live ? 'streaming' : ''}`} data-testid="message-assistant" aria-busy={live ? 'true' : undefined}>
      {reasoning && <Reasoning text={reasoning} thinking={!!live && !content} />}
      <div class="msg-body">
        {waiting ? (
          <div class="typing" aria-label="Waiting for the first token">
            <i />
            <i />
            <i />
          </div>
        ) : (
          <Markdown text={content} id={m.id} streaming={!!live} />
        )}
      </div>
      {calls?.map((t, i) => <ToolCallCard key={i} call={t} />)}
      {m.stopped && <div class="msg-note">Stopped.</div>}
      {m.error && (
        <div class="msg-error" role="alert" data-testid="message-error">
          {m.error}
        </div>
      )}
      {!live && (
        <div class="msg-actions">
          <IconButton icon="copy" label="Copy" onClick={() => copyText(m.content)} />
          {last && (
            <IconButton icon="retry" label="Regenerate" data-testid="regenerate" disabled={busy} onClick={() => void regenerate()} />
          )}
          {m.stats && <MessageStats stats={m.stats} />}
        </div>
      )}
    </div>
  );
}
