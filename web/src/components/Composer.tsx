import { useEffect, useRef, useState } from 'preact/hooks';
import { current } from '../state/conversations';
import { send, stop, working } from '../state/generate';
import { focusComposer } from '../state/ui';
import { Icon } from './icons';

/** Where you type: Enter sends, Shift+Enter breaks the line; while a reply streams, the button stops it. */
export function Composer() {
  const [text, setText] = useState('');
  const area = useRef<HTMLTextAreaElement>(null);
  const streaming = working.value;
  const convId = current.value.id;

  useEffect(() => {
    area.current?.focus();
  }, [focusComposer.value, convId]);

  // Grow with the text, up to a limit.
  useEffect(() => {
    const el = area.current;
    if (!el) return;
    el.style.height = 'auto';
    el.style.height = `${Math.min(el.scrollHeight, 240)}px`;
  }, [text]);

  const submit = () => {
    if (!text.trim() || streaming) return;
    void send(text);
    setText('');
  };

  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault();
        submit();
      }}
    >
      <textarea
        ref={area}
        rows={1}
        value={text}
        placeholder="Message the model"
        aria-label="Message"
        data-testid="composer"
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            submit();
          }
        }}
      />
      {streaming ? (
        <button type="button" class="send-btn stop" aria-label="Stop" title="Stop (Esc)" data-testid="stop" onClick={stop}>
          <Icon name="stop" />
        </button>
      ) : (
        <button
          type="submit"
          class="send-btn"
          aria-label="Send"
          title="Send (Enter)"
          data-testid="send"
          disabled={!text.trim()}
        >
          <Icon name="send" />
        </button>
      )}
    </form>
  );
}
