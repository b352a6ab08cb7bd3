import type { ButtonHTMLAttributes } from 'preact';
import { Icon, type IconName } from './icons';

type Props = { icon: IconName; label: string } & Omit<ButtonHTMLAttributes<HTMLButtonElement>, 'icon'>;

/** A button that shows an icon and names itself for screen readers and tooltips. */
export function IconButton({ icon, label, class: cls, ...rest }: Props) {
  return (
    <button type="button" class={`icon-btn ${cls ?? ''}`} aria-label={label} title={label} {...rest}>
      <Icon name={icon} />
    </button>
  );
}
