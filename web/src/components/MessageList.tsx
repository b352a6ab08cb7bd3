import { useEffect, useRef } from 'preact/hooks';
import { current } from '../state/conversations';
import { live } from '../state/generate';
import { AssistantMessage } from './AssistantMessage';
import { UserMessage } from './UserMessage';

/** The open conversation's messages; it follows the end of a streaming reply unless you scroll up. */
export function MessageList() {
  const conv = current.value;
  const reply = live.value?.conversationId === conv.id ? live.value : null;
  const scroller = useRef<HTMLDivElement>(null);
  const inner = useRef<HTMLDivElement>(null);
  const stick = useRef(true);

  useEffect(() => {
    const el = scroller.current;
    const content = inner.current;
    if (!el || !content) return;
    const onScroll = () => {
      stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
    };
    const follow = new ResizeObserver(() => {
      if (stick.current) el.scrollTop = el.scrollHeight;
    });
    el.addEventListener('scroll', onScroll, { passive: true });
    follow.observe(content);
    return () => {
      el.removeEventListener('scroll', onScroll);
      follow.disconnect();
    };
  }, []);

  useEffect(() => {
    stick.current = true;
    const el = scroller.current;
    if (el) el.scrollTop = el.scrollHeight;
  }, [conv.id]);

  const msgs = conv.messages;
  const lastIndex = msgs.length - 1;
  return (
    <div class="messages" ref={scroller}>
      <div class="messages-inner" ref={inner}>
        {msgs.length === 0 && !reply && (
          <div class="empty">
            <h1>hearth</h1>
            <p>Ask anything. Replies stream from the model on this machine; nothing leaves it.</p>
            <p class="hint">
              <kbd>Enter</kbd> send · <kbd>Shift</kbd>+<kbd>Enter</kbd> new line · <kbd>Esc</kbd> stop ·{' '}
              <kbd>Ctrl</kbd>+<kbd>K</kbd> search · <kbd>Ctrl</kbd>+<kbd>Shift</kbd>+<kbd>O</kbd> new chat
            </p>
          </div>
        )}
        {msgs.map((m, i) =>
          m.role === 'user' ? (
            <UserMessage key={m.id} message={m} />
          ) : (
            <AssistantMessage key={m.id} message={m} last={i === lastIndex && !reply} />
          ),
        )}
        {reply && <AssistantMessage key={reply.messageId} message={reply.message} live={reply} last />}
      </div>
    </div>
  );
}
