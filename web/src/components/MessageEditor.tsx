import { useEffect, useRef, useState } from 'preact/hooks';

/** Editing a sent message: Enter (or Save) resends from it, Escape cancels. */
export function MessageEditor(props: { text: string; onSave: (t: string) => void; onCancel: () => void }) {
  const [text, setText] = useState(props.text);
  const area = useRef<HTMLTextAreaElement>(null);
  useEffect(() => area.current?.focus(), []);
  return (
    <div class="msg-editor">
      <textarea
        ref={area}
        value={text}
        rows={Math.min(12, text.split('\n').length + 1)}
        data-testid="edit-box"
        onInput={(e) => setText(e.currentTarget.value)}
        onKeyDown={(e) => {
          if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
            e.preventDefault();
            props.onSave(text);
          } else if (e.key === 'Escape') {
            e.stopPropagation();
            props.onCancel();
          }
        }}
      />
      <div class="msg-editor-actions">
        <button type="button" class="btn" onClick={props.onCancel}>
          Cancel
        </button>
        <button type="button" class="btn primary" data-testid="edit-save" onClick={() => props.onSave(text)}>
          Save &amp; send
        </button>
      </div>
    </div>
  );
}
