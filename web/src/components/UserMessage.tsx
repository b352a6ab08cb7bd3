import { useState } from 'preact/hooks';
import { editAndResend, working } from '../state/generate';
import type { Message } from '../state/types';
import { copyText } from './copy';
import { IconButton } from './IconButton';
import { MessageEditor } from './MessageEditor';

/** Your message: copy it, or edit it and send again (everything after it is replaced). */
export function UserMessage({ message: m }: { message: Message }) {
  const [editing, setEditing] = useState(false);
  const busy = working.value;
  return (
    <div class="msg msg-user" data-testid="message-user">
      {editing ? (
        <MessageEditor
          text={m.content}
          onCancel={() => setEditing(false)}
          onSave={(t) => {
            setEditing(false);
            void editAndResend(m.id, t);
          }}
        />
      ) : (
        <>
          {m.images?.length ? (
            <div class="msg-images" data-testid="message-images">
              {m.images.map((url, i) => (
                <img key={i} src={url} alt={`Image ${i + 1}`} loading="lazy" />
              ))}
            </div>
          ) : null}
          {m.content && <div class="msg-body user-text">{m.content}</div>}
          <div class="msg-actions">
            <IconButton icon="copy" label="Copy" onClick={() => copyText(m.content)} />
            <IconButton icon="edit" label="Edit and resend" data-testid="edit" disabled={busy} onClick={() => setEditing(true)} />
          </div>
        </>
      )}
    </div>
  );
}
