// Inline SVG icons (stroke style): no icon font, nothing fetched.

const paths = {
  plus: 'M12 5v14M5 12h14',
  menu: 'M4 6h16M4 12h16M4 18h16',
  send: 'M5 12h14M13 6l6 6-6 6',
  stop: 'M7 7h10v10H7z',
  settings: 'M4 6h10M18 6h2M4 12h4M12 12h8M4 18h12M20 18h0M14 4v4M8 10v4M16 16v4',
  status: 'M4 20V10M10 20V4M16 20v-8M22 20H2',
  sun: 'M12 4V2M12 22v-2M4 12H2M22 12h-2M5 5l1.5 1.5M17.5 17.5L19 19M5 19l1.5-1.5M17.5 6.5L19 5M12 8a4 4 0 100 8 4 4 0 000-8z',
  moon: 'M20 14.5A8 8 0 019.5 4 8 8 0 1020 14.5z',
  auto: 'M12 3a9 9 0 100 18V3z M12 3a9 9 0 010 18',
  edit: 'M4 20h4L19 9l-4-4L4 16v4zM13 7l4 4',
  copy: 'M9 9h11v11H9zM5 15H4V4h11v1',
  retry: 'M4 12a8 8 0 0114-5.3L20 9M20 4v5h-5M20 12a8 8 0 01-14 5.3L4 15M4 20v-5h5',
  trash: 'M4 7h16M9 7V4h6v3M6 7l1 13h10l1-13',
  download: 'M12 4v11M7 10l5 5 5-5M5 20h14',
  upload: 'M12 20V9M7 14l5-5 5 5M5 4h14',
  close: 'M6 6l12 12M18 6L6 18',
  help: 'M9.5 9a2.5 2.5 0 115 0c0 2-2.5 2-2.5 4M12 17h0',
  search: 'M11 4a7 7 0 100 14 7 7 0 000-14zM20 20l-4-4',
  key: 'M15 4a5 5 0 00-4.6 7L4 17.4V20h3v-2h2v-2h2l1.6-1.6A5 5 0 1015 4z',
  image: 'M4 5h16v14H4zM4 16l5-5 4 4 2-2 5 5M15 9h0',
};

export type IconName = keyof typeof paths;

export function Icon({ name, size = 18 }: { name: IconName; size?: number }) {
  return (
    <svg
      width={size}
      height={size}
      viewBox="0 0 24 24"
      fill="none"
      stroke="currentColor"
      stroke-width="2"
      stroke-linecap="round"
      stroke-linejoin="round"
      aria-hidden="true"
    >
      <path d={paths[name]} />
    </svg>
  );
}
